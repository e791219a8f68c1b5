//! Ignored measurement (run by hand, release mode): 1 MiB one-sided shm writes against a
//! plain memcpy of the same size. Prints figures, asserts only that the data landed.
//!
//! `cargo test --release -p spindle-transport-rdma --test shm_perf -- --ignored --nocapture`

use std::time::{Duration, Instant};

use spindle_transport_rdma::shm::ShmEndpoint;
use spindle_transport_rdma::{Endpoint, FabricConfig, Region};

const BYTES: usize = 1 << 20;
/// Copies per timed batch.
const ROUNDS: usize = 100;
/// Timed batches per variant; the best one is reported (the machine is shared).
const BATCHES: usize = 7;

fn gib_per_s(elapsed: Duration) -> f64 {
    (BYTES * ROUNDS) as f64 / elapsed.as_secs_f64() / f64::from(1u32 << 30)
}

/// Best throughput over [`BATCHES`] batches of [`ROUNDS`] calls of `copy`.
fn best(mut copy: impl FnMut(usize)) -> f64 {
    (0..BATCHES)
        .map(|batch| {
            let start = Instant::now();
            for i in 0..ROUNDS {
                copy(batch * ROUNDS + i);
            }
            gib_per_s(start.elapsed())
        })
        .fold(0.0, f64::max)
}

#[test]
#[ignore = "measurement, run by hand in release mode"]
fn one_mib_writes_vs_memcpy() {
    let src: Vec<u8> = (0..BYTES).map(|i| i as u8).collect();
    let mut dst = vec![0u8; BYTES];
    let memcpy = best(|_| {
        dst.copy_from_slice(std::hint::black_box(&src));
        std::hint::black_box(&mut dst);
    });

    let heap = Region::new_heap(1, BYTES).unwrap();
    let region = best(|_| heap.write_bytes(0, std::hint::black_box(&src)).unwrap());

    let ns = format!("perf-{}", std::process::id());
    let a = ShmEndpoint::open(1, &ns, FabricConfig::default()).unwrap();
    let b = ShmEndpoint::open(2, &ns, FabricConfig::default()).unwrap();
    let row = b.register_region(1, BYTES + 8).unwrap();
    a.connect(2, &b.address()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while a.remote_region(2, 1).is_none() {
        assert!(Instant::now() < deadline, "link never came up");
        a.wait(Duration::from_millis(20));
        while a.poll_event().is_some() {}
    }
    let start = Instant::now();
    for i in 0..ROUNDS {
        a.write_then_release(2, 1, 8, &src, 0, i as u64 + 1)
            .unwrap();
    }
    let shm = gib_per_s(start.elapsed());
    assert_eq!(row.load_u64(0), ROUNDS as u64);
    assert_eq!(row.to_vec(8, BYTES).unwrap(), src);
    println!(
        "1 MiB: memcpy {memcpy:.2} GiB/s, Region::write_bytes {region:.2} GiB/s \
         ({:.0}%), shm write_then_release {shm:.2} GiB/s ({:.0}%)",
        100.0 * region / memcpy,
        100.0 * shm / memcpy
    );
}
