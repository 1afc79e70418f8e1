"""Grad-CAM (Selvaraju et al., 2017, arXiv:1610.02391): where in its input a network looks for a class.

The activation ``A`` of one layer (``(items, channels, *spatial)``) and the gradient of a score with respect to it
give each channel a weight, the gradient's mean over the spatial positions; the map is ``relu(sum_c w_c A_c)``,
scaled to ``[0, 1]`` per item. The gradient is taken with ``torch.autograd.grad`` with respect to that activation
only, so the parameters' ``.grad`` are left as they were.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from ...torchutils import to_tensor

__all__ = ['GradCam', 'grad_cam']

MODES = ('onehot', 'targets', 'prediction')


def _layer(module: nn.Module, layer: nn.Module | str) -> nn.Module:
    if isinstance(layer, nn.Module):
        if not any(layer is part for part in module.modules()):
            raise ValueError("Expected layer as a part of the network. Received: a module that is not in it. Pass "
                             "one of network.modules(), or its name from named_modules().")
        return layer
    names = dict(module.named_modules())
    if layer not in names:
        raise ValueError(f"Expected layer as the name of one of the network's modules. Received: layer={layer!r}. "
                         f"Names: {[name for name in names if name][:20]}...")
    return names[layer]


def _forward(module: nn.Module, inputs: list[torch.Tensor], layer: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """The prediction and the chosen layer's output; ``layer=None``: the last module whose output has spatial
    dimensions larger than one position (the last feature map)."""
    chosen = None if layer is None else _layer(module, layer)
    outputs: list[torch.Tensor] = []

    def keep(part: nn.Module, _: Any, output: Any) -> None:
        spatial = isinstance(output, torch.Tensor) and output.dim() >= 3 and output.shape[2:].numel() > 1
        if isinstance(output, torch.Tensor) and (part is chosen or (chosen is None and spatial)):
            outputs.append(output)
    handles = [part.register_forward_hook(keep) for part in module.modules() if chosen is None or part is chosen]
    try:
        prediction = module(*inputs)
    finally:
        for handle in handles:
            handle.remove()
    if not outputs:
        raise ValueError("Expected a layer whose output has channels and spatial dimensions. Received: "
                         f"layer={layer!r}, and no such output in the forward pass. Pass layer= a convolution.")
    if outputs[-1].dim() < 3:
        raise ValueError(f"Expected a layer whose output is (items, channels, *spatial). Received: an output of "
                         f"shape {tuple(outputs[-1].shape)} from layer={layer!r}. Pass a convolutional layer.")
    return prediction, outputs[-1]


def _seed(prediction: torch.Tensor, mode: Any, targets: Any, cam_class: Any) -> torch.Tensor:
    """The gradient to start from, shaped as the prediction."""
    if isinstance(mode, (np.ndarray, torch.Tensor)):
        return to_tensor(mode, 'gradient_mode').to(prediction.device, prediction.dtype).expand_as(prediction)
    if mode not in MODES:
        raise ValueError(f"Expected gradient_mode as one of {MODES} or an array. Received: {mode!r}.")
    if mode == 'prediction':
        return prediction.detach().clone()
    if mode == 'targets':
        if targets is None:
            raise ValueError("Expected targets with gradient_mode='targets'. Received: targets=None.")
        return to_tensor(targets, 'targets').to(prediction.device, prediction.dtype).reshape(prediction.shape)
    classes = prediction.detach().argmax(dim=1) if cam_class is None else torch.full(
        prediction.shape[:1], int(cam_class), device=prediction.device)
    if cam_class is not None and not 0 <= int(cam_class) < prediction.shape[1]:
        raise ValueError(f"Expected cam_class in [0, {prediction.shape[1]}). Received: cam_class={cam_class!r}.")
    return torch.nn.functional.one_hot(classes, prediction.shape[1]).to(prediction.dtype)


def grad_cam(module: nn.Module, inputs: Any, layer: nn.Module | str | None = None, gradient_mode: Any = 'onehot',
             targets: Any = None, cam_class: int | None = None) -> np.ndarray:
    """Grad-CAM maps of ``module`` for a batch: a float32 array ``(items, *spatial of layer)`` in ``[0, 1]``.

    Args:
        module: the network, run in evaluation mode (its mode is restored after).
        inputs: one input array or tensor (items first), or a list of them for a network of several inputs.
        layer: the module (or its name in ``named_modules()``) whose output is explained; ``None``: the last one
            with spatial dimensions of more than one position.
        gradient_mode: ``'onehot'`` explains ``cam_class`` (default: each item's predicted class); ``'targets'``
            starts the gradient from ``targets``; ``'prediction'`` from the prediction itself; an array is the
            gradient itself.
    """
    parameter = next(module.parameters(), None)
    device = parameter.device if parameter is not None else torch.device('cpu')
    tensors = [to_tensor(value, 'inputs').to(device) for value in (inputs if isinstance(inputs, list) else [inputs])]
    tensors = [t.to(parameter.dtype) if parameter is not None and t.is_floating_point() else t for t in tensors]
    training = module.training
    module.eval()
    try:
        with torch.enable_grad():
            prediction, activation = _forward(module, tensors, layer)
            (gradient,) = torch.autograd.grad(prediction, activation, _seed(prediction, gradient_mode, targets,
                                                                            cam_class))
    finally:
        module.train(training)
    spatial = tuple(range(2, activation.dim()))
    weights = gradient.mean(dim=spatial, keepdim=True)
    cam = torch.relu((weights * activation.detach()).sum(dim=1)).double()
    low = cam.amin(dim=tuple(range(1, cam.dim())), keepdim=True)
    spread = cam.amax(dim=tuple(range(1, cam.dim())), keepdim=True) - low
    cam = torch.where(spread > 0, (cam - low) / torch.where(spread > 0, spread, 1.0), torch.zeros_like(cam))
    return cam.cpu().numpy().astype(np.float32)


class GradCam:
    """``get_gradcam`` for a model whose primary network is ``self.model``."""

    def get_gradcam(self, inputs: Any, targets: Any = None, layer: nn.Module | str | None = None,
                    gradient_mode: Any = 'onehot', cam_class: int | None = None) -> np.ndarray:
        """Grad-CAM maps of a batch, one per item, in ``[0, 1]`` (batchflow's ``get_gradcam``, which returns the
        first item's map as ``uint8``); arguments as in ``flowpipe.models.torch.gradcam.grad_cam``."""
        return grad_cam(self.model, inputs, layer=layer, gradient_mode=gradient_mode, targets=targets,
                        cam_class=cam_class)
