import json
import os
import socket
import sys
import tempfile
import types
import unittest
from unittest import mock

import gpumeter


class ClientTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()
        self.path = os.path.join(self.dir, "p.sock")
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.server.bind(self.path)
        self.server.settimeout(2)

    def tearDown(self):
        self.server.close()
        os.unlink(self.path)
        os.rmdir(self.dir)

    def test_noop_outside_gpumeter(self):
        with mock.patch.dict(os.environ, {}, clear=True):
            self.assertFalse(gpumeter.enabled())
            self.assertFalse(gpumeter.progress(step=1, total_steps=10))

    def test_sends_one_json_datagram(self):
        with mock.patch.dict(os.environ, {"GPUMETER_SOCKET": self.path}):
            self.assertTrue(gpumeter.progress(step=120, total_steps=10000, samples=3840, tokens=491520,
                                              metrics={"loss": 2.31, "bad": "x", "nan": float("nan")}))
        msg = json.loads(self.server.recv(65536))
        self.assertEqual(msg, {"step": 120, "total_steps": 10000, "samples": 3840, "tokens": 491520,
                               "metrics": {"loss": 2.31}})

    def test_checkpoint_sends_the_path_or_true(self):
        with mock.patch.dict(os.environ, {"GPUMETER_SOCKET": self.path}):
            self.assertTrue(gpumeter.checkpoint("ckpt/step_100.pt"))
            self.assertTrue(gpumeter.checkpoint())
        self.assertEqual(json.loads(self.server.recv(65536)), {"checkpoint": "ckpt/step_100.pt"})
        self.assertEqual(json.loads(self.server.recv(65536)), {"checkpoint": True})
        with mock.patch.dict(os.environ, {}, clear=True):
            self.assertFalse(gpumeter.checkpoint("x.pt"))
        self.assertFalse(gpumeter.checkpoint(object()))  # not a path: dropped, never raised

    def test_missing_socket_is_silent(self):
        with mock.patch.dict(os.environ, {"GPUMETER_SOCKET": self.path + ".gone"}):
            self.assertFalse(gpumeter.progress(step=1))

    def test_bad_arguments_are_dropped_and_counted_never_raised(self):
        before = gpumeter.dropped()
        with mock.patch.dict(os.environ, {"GPUMETER_SOCKET": self.path}):
            self.assertTrue(gpumeter.progress(step=-1, total_steps="3", samples=2.5, tokens=7,
                                              metrics={"loss": object(), "acc": 0.5}))
        msg = json.loads(self.server.recv(65536))
        self.assertEqual(msg, {"tokens": 7, "metrics": {"acc": 0.5}})
        after = gpumeter.dropped()
        self.assertEqual(after["fields"] - before["fields"], 3)
        self.assertEqual(after["metrics"] - before["metrics"], 1)

    def test_scalars_with_index_or_float_or_item(self):
        class Index:
            def __index__(self):
                return 12

        class Item:
            def item(self):
                return 3.5

        with mock.patch.dict(os.environ, {"GPUMETER_SOCKET": self.path}):
            self.assertTrue(gpumeter.progress(step=Index(), total_steps=100.0, metrics={"lr": Item()}))
        msg = json.loads(self.server.recv(65536))
        self.assertEqual(msg, {"step": 12, "total_steps": 100, "metrics": {"lr": 3.5}})

    def test_hf_adapter_with_stand_in_trainer_callback_base_class(self):
        class TrainerCallback:
            pass

        stub = types.ModuleType("transformers")
        stub.TrainerCallback = TrainerCallback
        with mock.patch.dict(sys.modules, {"transformers": stub}), \
                mock.patch.dict(os.environ, {"GPUMETER_SOCKET": self.path}):
            cb = gpumeter.HFCallback()
            self.assertIsInstance(cb, TrainerCallback)
            state = types.SimpleNamespace(global_step=7, max_steps=70)
            cb.on_log(None, state, None, logs={"loss": 1.5, "epoch": 0.1})
        msg = json.loads(self.server.recv(65536))
        self.assertEqual(msg["step"], 7)
        self.assertEqual(msg["total_steps"], 70)
        self.assertEqual(msg["metrics"]["loss"], 1.5)

    def test_flops_per_token_is_sent_and_bad_values_dropped(self):
        with mock.patch.dict(os.environ, {"GPUMETER_SOCKET": self.path}):
            self.assertTrue(gpumeter.progress(tokens=4096, flops_per_token=4.8e10))
            msg = json.loads(self.server.recv(65536))
            self.assertEqual(msg, {"tokens": 4096, "flops_per_token": 4.8e10})
            before = gpumeter.dropped()["fields"]
            gpumeter.progress(step=1, flops_per_token=-1)
            self.assertEqual(json.loads(self.server.recv(65536)), {"step": 1})
            self.assertEqual(gpumeter.dropped()["fields"], before + 1)

    def test_callbacks_send_six_times_the_models_parameters(self):
        class TrainerCallback:
            pass

        class Model:
            def num_parameters(self, exclude_embeddings=False):
                return 1000 if exclude_embeddings else 1500

        stub = types.ModuleType("transformers")
        stub.TrainerCallback = TrainerCallback
        with mock.patch.dict(sys.modules, {"transformers": stub}), \
                mock.patch.dict(os.environ, {"GPUMETER_SOCKET": self.path}):
            cb = gpumeter.HFCallback()
            cb.on_train_begin(None, None, None, model=Model())
            self.assertEqual(json.loads(self.server.recv(65536)), {"flops_per_token": 6000.0})
            state = types.SimpleNamespace(global_step=3, max_steps=9, num_input_tokens_seen=12288)
            cb.on_step_end(None, state, None)
            self.assertEqual(json.loads(self.server.recv(65536)), {"step": 3, "total_steps": 9, "tokens": 12288})

    def test_lightning_adapter_with_stand_in_callback_base_class(self):
        class Callback:
            pass

        pkg = types.ModuleType("lightning")
        sub = types.ModuleType("lightning.pytorch")
        cbs = types.ModuleType("lightning.pytorch.callbacks")
        cbs.Callback = Callback
        modules = {"lightning": pkg, "lightning.pytorch": sub, "lightning.pytorch.callbacks": cbs}
        with mock.patch.dict(sys.modules, modules), mock.patch.dict(os.environ, {"GPUMETER_SOCKET": self.path}):
            cb = gpumeter.LightningCallback()
            self.assertIsInstance(cb, Callback)
            trainer = types.SimpleNamespace(estimated_stepping_batches=float("inf"), global_step=5,
                                            callback_metrics={"loss": 0.5, "name": "x"})
            cb.on_train_batch_end(trainer, None, None, None, 4)
        msg = json.loads(self.server.recv(65536))
        self.assertEqual(msg, {"step": 5, "metrics": {"loss": 0.5}})

    def test_adapters_need_their_framework(self):
        with mock.patch.dict(sys.modules, {"transformers": None}):
            with self.assertRaises(ImportError):
                gpumeter.HFCallback()


if __name__ == "__main__":
    unittest.main()


class ExtensionEntryPointTest(unittest.TestCase):
    def test_package_is_an_ipython_extension_without_importing_ipython(self):
        # %load_ext gpumeter finds these on the package; importing the stdlib-only client must not need IPython.
        self.assertTrue(callable(gpumeter.load_ipython_extension))
        self.assertTrue(callable(gpumeter.unload_ipython_extension))
        code = "import sys, gpumeter; print('IPython' in sys.modules)"
        import subprocess
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             env=dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(gpumeter.__file__))))
        self.assertEqual(out.stdout.strip(), "False", out.stderr)
