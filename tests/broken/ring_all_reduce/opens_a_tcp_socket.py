"""Tries to open a connection of its own after the rendezvous: the ranks may not (no network
beyond loopback exists for them, and no new socket but a local one)."""

import socket

import torch.distributed as dist


def ring_all_reduce(tensor):
    connection = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    connection.settimeout(1)
    connection.connect(("127.0.0.1", 80))
    return tensor.clone() * dist.get_world_size()
