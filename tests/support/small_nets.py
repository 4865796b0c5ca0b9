"""Small networks built with ptxc.Network, shared by the engine tests of both targets."""

import numpy as np

import ptxc


def conv_relu_pool():
    """conv 3x3 (bias, pad 1) -> relu -> max pool 2: input x 1x3x10x10 -> output y 1x4x5x5; fixed
    random weights (seed 0)."""
    rng = np.random.default_rng(0)
    net = ptxc.Network("small")
    x = net.add_input("x", (1, 3, 10, 10))
    y = net.add_conv(x, rng.standard_normal((4, 3, 3, 3)).astype(np.float32),
                     rng.standard_normal(4).astype(np.float32), padding=1)
    y = net.add_activation(y, "relu")
    net.mark_output(net.add_pooling(y, "max", kernel=2), "y")
    return net
