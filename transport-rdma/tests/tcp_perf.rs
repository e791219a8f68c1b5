//! Quick, ignored measurements of the tcp backend (run by hand; they assert nothing about
//! speed, the machine is shared and noisy):
//!
//! ```text
//! cargo test --release -p spindle-transport-rdma --test tcp_perf -- --ignored --nocapture
//! ```
//! Compare the throughput line with `iperf3 -s -1 & iperf3 -c 127.0.0.1 -t 5` on the same
//! machine, at the same time.

mod tcp_common;

use std::time::{Duration, Instant};

use spindle_transport_rdma::{Endpoint, Error};
use tcp_common::*;

/// Most 1 MiB writes one measurement issues.
const WRITES_MAX: u64 = 4_000;
/// Round trips in the latency measurement.
const ROUND_TRIPS: u64 = 20_000;

#[test]
#[ignore = "measurement, run by hand"]
fn throughput_of_1_mib_writes() {
    const SIZE: usize = 1 << 20;
    const WINDOW: u64 = 16; // writes in flight before waiting for the echo
    let (a, b) = (open(1), open(2));
    let rb = b.register_region(1, 8 + SIZE).unwrap();
    let ra = a.register_region(1, 8).unwrap();
    link(&a, &b);
    let payload = vec![0xabu8; SIZE];
    let time_max = Duration::from_secs(5);
    let start = Instant::now();
    let echo = {
        let b = b.clone();
        let rb = rb.clone();
        std::thread::spawn(move || {
            let mut last = 0;
            let deadline = Instant::now() + GIVE_UP;
            while last < WRITES_MAX && Instant::now() < deadline {
                let g = rb.load_u64(0);
                if g != last {
                    last = g;
                    b.write(1, 1, 0, &g.to_le_bytes()).unwrap();
                } else {
                    b.wait(Duration::from_millis(10));
                }
                if g == u64::MAX {
                    break;
                }
            }
        })
    };
    let mut sent = 0u64;
    while sent < WRITES_MAX && start.elapsed() < time_max {
        while sent >= ra.load_u64(0) + WINDOW {
            a.wait(Duration::from_millis(10));
        }
        match a.write_then_release(2, 1, 8, &payload, 0, sent + 1) {
            Ok(()) => sent += 1,
            Err(Error::QueueFull { .. }) => {
                a.wait(Duration::from_millis(1));
            }
            Err(e) => panic!("{e}"),
        }
    }
    wait_until(&*a, "echo of the last write", || ra.load_u64(0) == sent);
    let secs = start.elapsed().as_secs_f64();
    let gbit = sent as f64 * SIZE as f64 * 8.0 / secs / 1e9;
    println!("tcp 1 MiB writes: {sent} in {secs:.2} s = {gbit:.2} Gbit/s");
    a.write_then_release(2, 1, 8, &[], 0, u64::MAX).unwrap();
    echo.join().unwrap();
}

#[test]
#[ignore = "measurement, run by hand"]
fn round_trip_of_small_writes() {
    let (a, b) = (open(3), open(4));
    let rb = b.register_region(1, 64).unwrap();
    let ra = a.register_region(1, 64).unwrap();
    link(&a, &b);
    let pong = {
        let b = b.clone();
        std::thread::spawn(move || {
            let deadline = Instant::now() + GIVE_UP;
            for i in 1..=ROUND_TRIPS {
                while rb.load_u64(0) != i {
                    assert!(Instant::now() < deadline);
                    std::hint::spin_loop();
                }
                b.write_then_release(3, 1, 8, &[1; 32], 0, i).unwrap();
            }
        })
    };
    let mut samples = Vec::with_capacity(ROUND_TRIPS as usize);
    let deadline = Instant::now() + GIVE_UP;
    for i in 1..=ROUND_TRIPS {
        let t = Instant::now();
        a.write_then_release(4, 1, 8, &[1; 32], 0, i).unwrap();
        while ra.load_u64(0) != i {
            assert!(Instant::now() < deadline);
            std::hint::spin_loop();
        }
        samples.push(t.elapsed());
    }
    pong.join().unwrap();
    samples.sort();
    let p = |q: f64| samples[((samples.len() as f64 - 1.0) * q) as usize].as_secs_f64() * 1e6;
    println!(
        "tcp 32-byte write round trip: p50 {:.1} us, p99 {:.1} us",
        p(0.5),
        p(0.99)
    );
}
