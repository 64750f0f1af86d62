"""A node of a multi-node job listens on the address it is given alone (``--node-addr``): torchrun is
told the address and whether the node hosts the rendezvous, gloo its interface, and every store the
agent serves binds its host. The whole path, nodes in network namespaces of their own:
tests/system/netns/test_netns_nodes.py."""
from __future__ import annotations

import socket

import pytest

from emulator.errors import UserError
from emulator.host import interface_of
from emulator.launch.bounds import check_node_addr
from emulator.launch.launcher import gloo_env, torchrun_command
from emulator.rank import agent


def _flag(cmd: list[str], name: str) -> str | None:
    return cmd[cmd.index(name) + 1] if name in cmd else None


def test_a_node_given_its_address_is_the_ranks_address_and_hosts_the_rendezvous_at_it():
    host = torchrun_command("c.json", nproc=1, duration=None, nnodes=2, rdzv_endpoint="10.1.2.1:29500", node_addr="10.1.2.1")
    other = torchrun_command("c.json", nproc=1, duration=None, nnodes=2, rdzv_endpoint="10.1.2.1:29500", node_addr="10.1.2.2")
    assert _flag(host, "--local-addr") == "10.1.2.1" and _flag(host, "--rdzv-conf") == "is_host=1"
    assert _flag(other, "--local-addr") == "10.1.2.2" and _flag(other, "--rdzv-conf") == "is_host=0"
    fixed = torchrun_command("c.json", nproc=1, duration=None, nnodes=2, rdzv_endpoint="10.1.2.1:29500", node_rank=1,
                             node_addr="10.1.2.2")
    assert _flag(fixed, "--local-addr") == "10.1.2.2" and _flag(fixed, "--master-addr") == "10.1.2.1"
    # without an address: torchrun's own guesses, as before
    guess = torchrun_command("c.json", nproc=1, duration=None, nnodes=2, rdzv_endpoint="10.1.2.1:29500")
    assert "--local-addr" not in guess and "--rdzv-conf" not in guess


def test_gloo_listens_on_the_nodes_interface_or_on_loopback_alone():
    assert gloo_env(2, "10.1.2.1:29500", "eth1") == {"GLOO_SOCKET_IFNAME": "eth1"}
    assert gloo_env(2, "10.1.2.1:29500") == {}
    assert gloo_env(1, None) == {"GLOO_SOCKET_IFNAME": "lo"}
    assert interface_of("127.0.0.1") == "lo" and interface_of("203.0.113.77") is None


@pytest.mark.parametrize("addr, endpoint, why", [
    ("127.0.0.1", None, "give --rdzv-endpoint too"),
    ("node0", "127.0.0.1:29500", "expected an IPv4 address"),
    ("::1", "127.0.0.1:29500", "expected an IPv4 address"),
    ("203.0.113.77", "127.0.0.1:29500", "not the (first) IPv4 address of any of this host's interfaces"),
])
def test_a_node_address_that_is_not_this_hosts_is_refused(addr, endpoint, why):
    with pytest.raises(UserError, match=f"--node-addr .*{why.replace('(', '.').replace(')', '.')}"):
        check_node_addr(addr, endpoint)
    assert check_node_addr("127.0.0.1", "127.0.0.1:29500") == "lo"


def test_a_store_the_agent_serves_binds_its_host_alone():
    fd = agent.bound_socket("127.0.0.1", 0)
    with socket.socket(fileno=fd) as sock:
        assert sock.getsockname()[0] == "127.0.0.1"
    with pytest.raises(OSError):
        agent.bound_socket("203.0.113.77", 0)  # not this host's: torch's callers then try as a client
