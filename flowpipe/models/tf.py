"""flowpipe is built on PyTorch: there are no TensorFlow models (batchflow's ``batchflow.models.tf``)."""
raise ImportError("flowpipe has no TensorFlow models: it is built on PyTorch. Use flowpipe.models.torch (TorchModel, "
                  "ResNet18, VGG7...), or put your own torch nn.Module under the model config key 'model' "
                  "(see docs/porting.md).")
