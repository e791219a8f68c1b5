//! The engine's per-message stages (`cargo bench -p spindle-group --bench engine`): two
//! nodes whose "fabric" copies each push into the peer's region, as a one-sided write
//! does, in one thread. `slot_write` is loaning a slot, writing 1 KiB into it and
//! committing; `send_to_delivery` is that plus the rounds of `step` and pushes until the
//! receiver delivered the message (atomic: stable at both). Throughput is per message.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use spindle_group::{DeliveryMode, Engine, EngineConfig, Layout, SubgroupSpec, View};
use spindle_transport_rdma::Region;

/// Messages per measured batch (a quarter of the window, so no batch waits for room).
const BATCH: usize = 64;
const WINDOW_SLOTS: usize = 256;
const PAYLOAD_BYTES: usize = 1024;

struct Pair {
    engines: Vec<Engine>,
    regions: BTreeMap<u32, Region>,
}

impl Pair {
    fn new(mode: DeliveryMode) -> Pair {
        let view = View::new(1, vec![1, 2]);
        let layout = Layout {
            subgroups: vec![SubgroupSpec {
                id: 0,
                members: vec![1, 2],
                senders: vec![1],
                mode,
                window_slots: WINDOW_SLOTS,
                slot_payload_bytes: PAYLOAD_BYTES,
                rdmc: None,
                delivery_prefix: None,
            }],
        };
        let mut regions = BTreeMap::new();
        let mut engines = Vec::new();
        for node in [1, 2] {
            let e = Engine::new(
                node,
                view.clone(),
                layout.clone(),
                EngineConfig::default(),
                |id, len| {
                    let r = Region::new_heap(id, len)?;
                    regions.insert(node, r.clone());
                    Ok(r)
                },
            )
            .expect("engine");
            engines.push(e);
        }
        Pair { engines, regions }
    }

    /// Steps both engines until node 2 delivered `n` messages.
    fn deliver(&mut self, n: usize) {
        let mut got = 0;
        while got < n {
            for e in &mut self.engines {
                e.step();
                let regions = &self.regions;
                e.drain_pushes(|push, bytes| push.apply(&regions[&push.peer], bytes));
            }
            while let Some(b) = self.engines[1].poll_delivery() {
                got += b.len();
            }
            while self.engines[0].poll_delivery().is_some() {}
        }
    }
}

fn engine(c: &mut Criterion) {
    let payload = vec![0xA5u8; PAYLOAD_BYTES];
    let mut g = c.benchmark_group("engine");
    g.throughput(Throughput::Elements(BATCH as u64));
    for (name, mode) in [
        ("atomic", DeliveryMode::Atomic),
        ("unordered", DeliveryMode::Unordered),
    ] {
        let mut pair = Pair::new(mode);
        let sender = pair.engines[0].sender(0).expect("sender");
        g.bench_function(format!("slot_write_1KiB/{name}"), |b| {
            b.iter_custom(|iters| {
                let mut timed = Duration::ZERO;
                for _ in 0..iters {
                    let start = Instant::now();
                    for _ in 0..BATCH {
                        let mut loan = sender.try_loan().expect("room");
                        loan.write_at(0, &payload).expect("fits");
                        loan.commit();
                    }
                    timed += start.elapsed();
                    // Not timed: deliver, so the next batch has room.
                    pair.deliver(BATCH);
                }
                timed
            })
        });
        g.bench_function(format!("send_to_delivery_1KiB/{name}"), |b| {
            b.iter(|| {
                for _ in 0..BATCH {
                    sender.try_send(&payload).expect("room");
                }
                pair.deliver(BATCH);
            })
        });
    }
    g.finish();
}

criterion_group!(benches, engine);
criterion_main!(benches);
