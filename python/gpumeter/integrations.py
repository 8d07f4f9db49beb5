"""Framework adapters; each imports its framework only when asked for."""
from . import progress


def _training_flops_per_token(model):
    """6 x the parameters the model trains with (the Trainer's own floating_point_ops basis: embeddings
    excluded where the model can say so); None when the model cannot be counted."""
    try:
        if hasattr(model, "num_parameters"):
            params = model.num_parameters(exclude_embeddings=True)
        else:
            params = sum(p.numel() for p in model.parameters())
        return 6.0 * float(params) if params and params > 0 else None
    except Exception:  # noqa: BLE001 - a model we cannot count gives no MFU, never an error
        return None


def make_hf_callback():
    from transformers import TrainerCallback  # noqa: imported lazily on purpose

    class GpumeterHFCallback(TrainerCallback):
        def on_train_begin(self, args, state, control, model=None, **kwargs):
            flops = _training_flops_per_token(model) if model is not None else None
            if flops:
                progress(flops_per_token=flops)

        def on_step_end(self, args, state, control, **kwargs):
            # Tokens when the Trainer counts them (TrainingArguments(include_num_input_tokens_seen=True)).
            tokens = getattr(state, "num_input_tokens_seen", None) or None
            progress(step=state.global_step, total_steps=state.max_steps or None, tokens=tokens)

        def on_log(self, args, state, control, logs=None, **kwargs):
            progress(step=state.global_step, total_steps=state.max_steps or None, metrics=logs or {})

    return GpumeterHFCallback


def make_lightning_callback():
    try:
        from lightning.pytorch.callbacks import Callback
    except ImportError:
        from pytorch_lightning.callbacks import Callback

    class GpumeterLightningCallback(Callback):
        def on_train_start(self, trainer, pl_module):
            flops = _training_flops_per_token(pl_module)
            if flops:
                progress(flops_per_token=flops)

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
