#!/usr/bin/env python3
"""A plain Cyclone DDS application (the `cyclonedds` Python package only) for the interop
tests: the same workload and checks as interop-rustdds-peer and interop-spindle-peer
(interop-tests/src/workload.rs, restated here from its docs).

  cyclone_peer.py pub DOMAIN WRITER COUNT PAYLOAD_BYTES [READERS [GAP_US]]
      waits for READERS (default 1) matched readers, pausing GAP_US between samples, writes COUNT samples and a dispose of k0, waits for
      acknowledgments, prints `SENT COUNT`, stays up until stdin closes
  cyclone_peer.py record DOMAIN TIMEOUT_S
      the semantic comparison's reader: `RECORD samples=N set=… order=…`
  cyclone_peer.py sub DOMAIN WRITERS COUNT PAYLOAD_BYTES TIMEOUT_S
      prints `READY`, takes until WRITERS writers delivered COUNT samples and a dispose
      each (checking the order per writer within each instance: Cyclone's take groups
      samples by instance), prints `OK …` or `INCOMPLETE …`; exit 0 iff OK

With INTEROP_WAIT_GO=1, `pub` prints `MATCHED` once matched and waits for a line `go` on
stdin; `sub` prints `MATCHED` once it knows a writer.

Loopback only: run with CYCLONEDDS_URI naming the lo interface (the Rust test does).
"""

import os
import sys
import time
from dataclasses import dataclass

import cyclonedds.idl.annotations as annotate
from cyclonedds.core import InstanceState, Policy, Qos
from cyclonedds.domain import DomainParticipant
from cyclonedds.idl import IdlStruct
from cyclonedds.pub import DataWriter
from cyclonedds.sub import DataReader
from cyclonedds.topic import Topic
from cyclonedds.util import duration

TOPIC = "InteropReadings"
KEYS = 8
DISPOSED_KEY = "k0"


@dataclass
@annotate.final
class KeyedString(IdlStruct, typename="DDS::KeyedString"):
    key: str
    annotate.key("key")
    value: str


def key_of(seq):
    return f"k{seq % KEYS}"


def value_of(writer, seq, nbytes):
    v = f"w{writer:03}-s{seq:010}-"
    pad = "".join(chr(ord("a") + i % 26) for i in range(max(0, nbytes - len(v))))
    return v + pad


def parse_value(v):
    try:
        w, rest = v[1:].split("-s", 1)
        s, _ = rest.split("-", 1)
        return int(w), int(s)
    except ValueError:
        return None


QOS = Qos(
    Policy.Reliability.Reliable(duration(seconds=5)),
    Policy.History.KeepAll,
    Policy.ResourceLimits(max_samples=1 << 20, max_instances=1 << 20,
                          max_samples_per_instance=1 << 20),
    # XCDR1, as Spindle and RustDDS encode.
    Policy.DataRepresentation(use_cdrv0_representation=True),
)


def fnv(pairs):
    h = 0xCBF29CE484222325
    for w, s in pairs:
        for b in w.to_bytes(4, "little") + s.to_bytes(8, "little"):
            h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def record(dp, topic, timeout_s):
    """The semantic comparison's reader: as RECORD_QUIET_MS in workload.rs."""
    r = DataReader(dp, topic, qos=QOS)
    print("READY", flush=True)
    order, last, deadline = [], time.time(), time.time() + timeout_s
    while time.time() < deadline and (not order or time.time() - last < 3.0):
        got = r.take(N=1024)
        if not got:
            time.sleep(0.001)
        for s in got:
            if s.sample_info.valid_data:
                p = parse_value(s.value)
                if p:
                    order.append(p)
                    last = time.time()
    print(f"RECORD samples={len(order)} set={fnv(sorted(order)):016x} order={fnv(order):016x}",
          flush=True)
    for line in sys.stdin:
        if line.strip() == "stop":
            break
    return 0


def main():
    mode, domain = sys.argv[1], int(sys.argv[2])
    dp = DomainParticipant(domain)
    topic = Topic(dp, TOPIC, KeyedString, qos=QOS)
    if mode == "pub":
        writer_id, count, nbytes = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
        readers = int(sys.argv[6]) if len(sys.argv) > 6 else 1
        gap_s = int(sys.argv[7]) / 1e6 if len(sys.argv) > 7 else 0
        w = DataWriter(dp, topic, qos=QOS)
        deadline = time.time() + 30
        while w.get_publication_matched_status().current_count < readers:
            if time.time() > deadline:
                sys.exit("no reader matched in 30 s")
            time.sleep(0.02)
        if os.environ.get("INTEROP_WAIT_GO") == "1":
            # Matched; write once the test says the other side knows this writer too.
            print("MATCHED", flush=True)
            for line in sys.stdin:
                if line.strip() == "go":
                    break
        for seq in range(count):
            if gap_s:
                time.sleep(gap_s)
            w.write(KeyedString(key=key_of(seq), value=value_of(writer_id, seq, nbytes)))
        w.dispose(KeyedString(key=DISPOSED_KEY, value=""))
        acked = w.wait_for_acks(duration(seconds=60))
        print(f"SENT {count} acked={acked}", flush=True)
        for line in sys.stdin:
            if line.strip() == "stop":
                break
        return 0
    if mode == "record":
        return record(dp, topic, int(sys.argv[3]))
    writers, count, nbytes, timeout_s = (int(a) for a in sys.argv[3:7])
    r = DataReader(dp, topic, qos=QOS)
    print("READY", flush=True)
    # Cyclone's take returns samples grouped by instance (it does not implement ordered
    # access), so the order checked is per writer and instance: within an instance a
    # writer's samples come in the order it wrote them. Every sample must arrive.
    nxt = {}  # (writer, key) -> next seq due
    got_n = {}  # writer -> samples received
    disposed, problems, received, disposes = set(), [], 0, 0
    keys = {}

    def complete():
        return (len(got_n) >= writers and all(n >= count for n in got_n.values())
                and len(disposed) >= writers)

    k0_disposed = False
    deadline = time.time() + timeout_s
    matched = False
    while not complete() and time.time() < deadline:
        if not matched and r.get_subscription_matched_status().current_count > 0:
            print("MATCHED", flush=True)
            matched = True
        got = r.take(N=1024)
        if not got:
            time.sleep(0.001)
        for s in got:
            info = s.sample_info
            if info.valid_data:
                received += 1
                keys[info.instance_handle] = s.key
                p = parse_value(s.value)
                if p is None:
                    problems.append(f"value {s.value!r} is not a workload value")
                    continue
                wr, seq = p
                due = nxt.get((wr, s.key), seq % KEYS)
                if seq != due:
                    problems.append(f"writer {wr} instance {s.key}: sample {seq} where {due} was due")
                nxt[(wr, s.key)] = seq + KEYS
                got_n[wr] = got_n.get(wr, 0) + 1
                if s.key != key_of(seq):
                    problems.append(f"writer {wr} sample {seq}: key {s.key!r}")
                if s.value != value_of(wr, seq, nbytes):
                    problems.append(f"writer {wr} sample {seq}: payload bytes differ")
            # no-data sample only when no data sample is left to carry it.
            key = s.key if info.valid_data else s.key_sample.key
            if info.instance_state == InstanceState.NotAliveDisposed and key == DISPOSED_KEY:
                k0_disposed = True
        if k0_disposed:
            for wr, n in got_n.items():
                if n >= count and wr not in disposed:
                    disposed.add(wr)
                    disposes += 1
    for p in problems[:20]:
        print(f"PROBLEM {p}")
    ok = complete() and not problems
    print(f"{'OK' if ok else 'INCOMPLETE'} received={received} writers={len(got_n)} "
          f"disposes={disposes} problems={len(problems)}", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
