#!/usr/bin/env bash
# A single-node Ceph RGW (one mon, one OSD, radosgw) on 127.0.0.1, self-contained in one folder.
#
#   scripts/rgw-server.sh start [DIR] lay out a cluster in DIR, start it, print endpoint and keys
#   scripts/rgw-server.sh stop DIR    stop exactly the daemons that start recorded in DIR/pids
#
# DIR is a folder start makes (mode 0700), or an empty one of yours that nobody else may enter
# (mktemp -d); without DIR start makes one with mktemp -d. Anything else (another user's folder, a
# link, a folder others may write, or one on a way through such folders) is refused: the daemons run
# as you and read DIR/ceph.conf (scripts/private-folder.sh; docs/security.md).
#
# start prints four shell-assignable lines (the last three also written to DIR/env):
#   dir=DIR
#   endpoint=http://127.0.0.1:PORT
#   access_key=...
#   secret_key=...
# Needs the Debian packages ceph-mon ceph-osd radosgw ceph-common (see docs/evaluating-a-design.md).
# Everything listens on 127.0.0.1 only; no cephx (a throwaway test cluster). The OSD keeps its
# data in bluestore on a sparse file of RGW_BLOCK_SIZE bytes (default 8 GiB), so its memory stays
# bounded however much the tests write. Several clusters may run side by side in different folders.
# radosgw's port is picked when it starts; one another process took first is picked again (3 tries).
# RGW_TRY_PORT: the port its first try takes (the tests use it to take one that is in use).
set -euo pipefail
# shellcheck source=scripts/private-folder.sh
. "$(dirname "${BASH_SOURCE[0]}")/private-folder.sh"

BLOCK_SIZE=${RGW_BLOCK_SIZE:-$((8 << 30))}
START_TIMEOUT_S=${RGW_START_TIMEOUT_S:-120}
# glibc malloc (Debian's build) otherwise keeps freed memory in many arenas
export MALLOC_MMAP_THRESHOLD_=131072 MALLOC_ARENA_MAX=4

STARTING_DIR=""  # set once start has launched something: a failure then stops what it started

die() {
  echo "rgw-server: $*" >&2
  [ -z "$STARTING_DIR" ] || stop "$STARTING_DIR" >/dev/null 2>&1 || true
  exit 1
}

port_in_use() {  # port_in_use PORT: something on 127.0.0.1 holds PORT
  ! python3 -c 'import socket, sys; socket.socket().bind(("127.0.0.1", int(sys.argv[1])))' "$1" 2>/dev/null
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

random_text() {  # random_text N ALPHABET: N random characters from ALPHABET
  tr -dc "$2" </dev/urandom | head -c "$1" || true
}

write_conf() {  # write_conf DIR MON_PORT RGW_PORT FSID
  local dir=$1
  cat >"$dir/ceph.conf" <<EOF
[global]
fsid = $4
mon host = [v2:127.0.0.1:$2]
public addr = 127.0.0.1
public network = 127.0.0.1/32
ms bind msgr1 = false
ms bind ipv6 = false
# a throwaway local cluster: no cephx; without cephx the 'secure' modes hang radosgw for 300 s
auth cluster required = none
auth service required = none
auth client required = none
ms mon client mode = crc
ms client mode = crc
ms cluster mode = crc
ms service mode = crc
client mount timeout = 30
keyring = $dir/keyring
# one OSD: pools of size 1
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
mon allow pool size one = true
mon warn on pool no redundancy = false
osd crush chooseleaf type = 0
# a prompt start (about 15 s without these)
paxos propose interval = 0.05
paxos min wait = 0.01
run dir = $dir/run
admin socket = $dir/run/\$name.asok
log file = $dir/log/\$name.log
mon data = $dir/mon/\$id
osd data = $dir/osd/\$id
[osd]
osd objectstore = bluestore
bluestore block create = true
bluestore block size = $BLOCK_SIZE
bluestore cache autotune = false
bluestore cache size = 134217728
osd memory target = 939524096
[client.rgw]
rgw frontends = beast endpoint=127.0.0.1:$3
# deleted and overwritten objects are freed within seconds rather than after 2 h
rgw gc obj min wait = 0
rgw gc processor period = 10
EOF
  : >"$dir/keyring"
}

# start_daemon DIR NAME CMD...: start one daemon in the foreground of its own background job,
# its output in DIR/log/NAME.out, and record its PID in DIR/pids
start_daemon() {
  local dir=$1 name=$2
  shift 2
  "$@" -f -c "$dir/ceph.conf" </dev/null >"$dir/log/$name.out" 2>&1 &
  echo "$name $!" >>"$dir/pids"
}

running() {  # running PID: the process exists and is not a zombie
  local state
  state=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) && [ "$state" != Z ]
}

# check_alive DIR: fail (naming the daemon's log) if a recorded daemon has exited
check_alive() {
  local dir=$1 name pid
  while read -r name pid; do
    running "$pid" || die "$name failed to start; see $dir/log/$name.log and $dir/log/$name.out"
  done <"$dir/pids"
}

# wait_for DIR WHAT CMD...: retry CMD until it succeeds, while the daemons live, up to the timeout
wait_for() {
  local dir=$1 what=$2 deadline=$((SECONDS + START_TIMEOUT_S))
  shift 2
  until "$@" >/dev/null 2>&1; do
    check_alive "$dir"
    ((SECONDS < deadline)) || die "timed out after ${START_TIMEOUT_S}s waiting for $what; logs in $dir/log"
    sleep 0.2
  done
}

# start_rgw DIR: radosgw on a free port, set in RGW_PORT. A port is free when picked, not always when
# radosgw binds it (other processes pick ports too): a try that finds it taken is made again on another.
start_rgw() {
  local dir=$1 try port pid deadline
  for try in 1 2 3; do
    port=$(free_port)
    [ "$try" -gt 1 ] || port=${RGW_TRY_PORT:-$port}
    sed -i "s/^rgw frontends = beast endpoint=127.0.0.1:.*/rgw frontends = beast endpoint=127.0.0.1:$port/" "$dir/ceph.conf"
    start_daemon "$dir" client.rgw radosgw -n client.rgw
    pid=$(awk '$1 == "client.rgw" {p = $2} END {print p}' "$dir/pids")
    deadline=$((SECONDS + START_TIMEOUT_S))
    until s3_answers "http://127.0.0.1:$port/" >/dev/null 2>&1; do
      # its log says so, or (it exited before its log was written out) another process holds the port
      if grep -q "failed to bind address 127.0.0.1:$port: Address already in use" "$dir/log/client.rgw.log" 2>/dev/null \
          || { ! running "$pid" && port_in_use "$port"; }; then
        kill "$pid" 2>/dev/null || true  # it may take half a minute to exit by itself
        while running "$pid"; do sleep 0.1; done
        sed -i "/^client.rgw $pid\$/d" "$dir/pids"
        echo "127.0.0.1:$port was taken when radosgw bound it; tried another" >>"$dir/log/client.rgw.retries"
        continue 2
      fi
      check_alive "$dir"
      ((SECONDS < deadline)) || die "timed out after ${START_TIMEOUT_S}s waiting for radosgw on 127.0.0.1:$port; logs in $dir/log"
      sleep 0.2
    done
    RGW_PORT=$port
    return 0
  done
  die "radosgw found its port taken 3 times; see $dir/log/client.rgw.log"
}

ceph_cli() {  # ceph_cli DIR ARGS...: the ceph CLI against this cluster
  local dir=$1
  shift
  timeout 60 ceph -c "$dir/ceph.conf" --connect-timeout 30 "$@"
}

start() {
  local dir=${1:-}
  for cmd in ceph-mon ceph-osd radosgw radosgw-admin ceph monmaptool; do
    command -v "$cmd" >/dev/null || die "$cmd not found: apt-get install --no-install-recommends ceph-mon ceph-osd radosgw ceph-common"
  done
  if [ -z "$dir" ]; then
    dir=$(mktemp -d "${TMPDIR:-/tmp}/ckpt-emu-rgw.XXXXXX") || die "mktemp -d failed"
  fi
  if [ -e "$dir/pids" ] && [ ! -L "$dir" ] && [ ! -L "$dir/pids" ]; then
    die "$dir already holds a running cluster (stop it first: $0 stop $dir)"
  fi
  dir=$(private_folder "$dir") || exit 1  # it said why, in one line
  echo "dir=$dir"
  mkdir "$dir"/{mon,osd,osd/0,run,log}
  local mon_port rgw_port fsid osd_uuid
  mon_port=$(free_port)
  rgw_port=$(free_port)
  fsid=$(cat /proc/sys/kernel/random/uuid)
  osd_uuid=$(cat /proc/sys/kernel/random/uuid)
  write_conf "$dir" "$mon_port" "$rgw_port" "$fsid"
  : >"$dir/pids"
  STARTING_DIR=$dir

  monmaptool --create --fsid "$fsid" --addv a "[v2:127.0.0.1:$mon_port]" "$dir/monmap" >/dev/null
  ceph-mon -c "$dir/ceph.conf" -i a --mkfs --monmap "$dir/monmap" >"$dir/log/mkfs-mon.out" 2>&1 \
    || die "ceph-mon --mkfs failed; see $dir/log/mkfs-mon.out"
  start_daemon "$dir" mon.a ceph-mon -i a
  wait_for "$dir" "the monitor" ceph_cli "$dir" mon stat

  local osd_id
  osd_id=$(ceph_cli "$dir" osd new "$osd_uuid") || die "'ceph osd new' failed; see $dir/log/mon.a.log"
  [ "$osd_id" = 0 ] || die "expected OSD id 0, got '$osd_id'"
  ceph-osd -c "$dir/ceph.conf" -i 0 --mkfs --osd-uuid "$osd_uuid" >"$dir/log/mkfs-osd.out" 2>&1 \
    || die "ceph-osd --mkfs failed; see $dir/log/mkfs-osd.out"
  start_daemon "$dir" osd.0 ceph-osd -i 0
  wait_for "$dir" "the OSD to come up" osd_up "$dir"

  start_rgw "$dir"
  rgw_port=$RGW_PORT

  local access_key secret_key
  access_key=$(random_text 20 'A-Z0-9')
  secret_key=$(random_text 40 'A-Za-z0-9')
  timeout 60 radosgw-admin -c "$dir/ceph.conf" -n client.admin user create --uid ckpt-emu \
    --display-name ckpt-emu --access-key "$access_key" --secret "$secret_key" >"$dir/log/user.out" 2>&1 \
    || die "radosgw-admin user create failed; see $dir/log/user.out"
  printf 'endpoint=http://127.0.0.1:%s\naccess_key=%s\nsecret_key=%s\n' \
    "$rgw_port" "$access_key" "$secret_key" | tee "$dir/env"
}

s3_answers() {  # s3_answers URL: true once an anonymous ListBuckets there succeeds
  python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)' "$1"
}

osd_up() {  # osd_up DIR: true once osd.0 is up
  ceph_cli "$1" osd dump | grep -q '^osd\.0 up'
}

# stop DIR: stop exactly the daemons start recorded, newest first (radosgw, OSD, then the monitor
# they need to shut down cleanly): SIGTERM, SIGKILL after 10 s. A PID is signalled only while its
# command line still names this cluster's ceph.conf, so a recycled PID is never hit.
stop() {
  local dir=$1 name pid i entries=()
  [ -e "$dir" ] || [ -L "$dir" ] || return 0
  dir=$(own_folder "$dir") || exit 1  # it said why, in one line
  [ -f "$dir/pids" ] && [ ! -L "$dir/pids" ] || return 0
  mapfile -t entries <"$dir/pids"
  for ((i = ${#entries[@]} - 1; i >= 0; i--)); do
    read -r name pid <<<"${entries[i]}"
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "-c $dir/ceph.conf" || continue
    kill -TERM "$pid" 2>/dev/null || continue
    local deadline=$((SECONDS + 10))
    while running "$pid" && ((SECONDS < deadline)); do sleep 0.05; done
    running "$pid" && kill -KILL "$pid" 2>/dev/null
  done
  rm -f "$dir/pids"
}

case "${1:-}" in
  start) [ $# -le 2 ] || die "usage: $0 start [DIR]"; start "${2:-}" ;;
  stop) [ $# -eq 2 ] || die "usage: $0 stop DIR"; stop "$2" ;;
  *) die "usage: $0 start [DIR] | stop DIR" ;;
esac
