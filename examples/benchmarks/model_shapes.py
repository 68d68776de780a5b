"""The gradient sets the benchmarks reduce."""

from typing import List


def resnet50_shapes() -> List[tuple]:
    """ResNet-50 v1's gradient shapes (MXNet's model zoo: 193 arrays, 25.6 M floats)."""
    import mxnet as mx

    net = mx.gluon.model_zoo.vision.resnet50_v1()
    net.initialize()
    net(mx.nd.zeros((1, 3, 32, 32)))
    return [p.shape for p in net.collect_params().values() if p.grad_req != "null"]
