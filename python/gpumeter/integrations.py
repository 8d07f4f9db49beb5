"""Framework adapters; each imports its framework only when asked for."""
from . import progress


def make_hf_callback():
    from transformers import TrainerCallback  # noqa: imported lazily on purpose

    class GpumeterHFCallback(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            progress(step=state.global_step, total_steps=state.max_steps or None)

        def on_log(self, args, state, control, logs=None, **kwargs):
            progress(step=state.global_step, total_steps=state.max_steps or None, metrics=logs or {})

    return GpumeterHFCallback


def make_lightning_callback():
    try:
        from lightning.pytorch.callbacks import Callback
    except ImportError:
        from pytorch_lightning.callbacks import Callback

    class GpumeterLightningCallback(Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            total = trainer.estimated_stepping_batches
            total = int(total) if total and total != float("inf") else None
            metrics = {}
            for key, value in (trainer.callback_metrics or {}).items():
                try:
                    metrics[key] = float(value)
                except (TypeError, ValueError):
                    pass
            progress(step=trainer.global_step, total_steps=total, metrics=metrics)

    return GpumeterLightningCallback
