//! RDMC's completion time on the sim fabric with its bandwidth model, in virtual time (so
//! not a timing assertion): seeded cases of 8–32 receivers and 4–16 blocks, real bytes
//! (every receiver's copy is checked against the root's). The binomial pipeline must
//! finish within 1.2× the paper's bound (`k + ceil(log2 n) - 1` block steps, RDMC §4.4)
//! and, as RDMC §5 predicts for several blocks and more than a handful of receivers,
//! before the chain, the binomial tree and sequential sends; sequential is the slowest.
//! A failure names its seed and case; `RDMC_COMPLETION_SEED=<seed>` reruns just that one.

use spindle_group::rdmc::model::binomial_pipeline_bound_us;
use spindle_group::rdmc::ScheduleKind;
use spindle_group::rdmc_sim::{measure_completion, CompletionCase, LinkSpec, RdmcData};

/// Seeds `cargo test` runs.
const SEEDS: u64 = 8;

/// The case of `seed`: receivers, blocks, block size and links, drawn from the seed.
fn case_of(seed: u64) -> (u32, u32, usize, LinkSpec) {
    // A small mixing generator: the cases only need to differ between seeds.
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0x5851_f42d_4c95_7f2d;
    let mut draw = |lo: u64, hi: u64| {
        x ^= x >> 33;
        x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
        x ^= x >> 33;
        lo + x % (hi - lo + 1)
    };
    let receivers = draw(8, 32) as u32;
    let blocks = draw(4, 16) as u32;
    let block_bytes = [16usize << 10, 64 << 10][draw(0, 1) as usize];
    let link = LinkSpec {
        // 1.25 GB/s or 12.5 GB/s per direction: a block takes 1.3–52 µs.
        rate_bytes_per_s: [1_250_000_000u64, 12_500_000_000][draw(0, 1) as usize],
        latency_us: draw(1, 3),
    };
    (receivers, blocks, block_bytes, link)
}

fn check_seed(seed: u64) {
    let (receivers, blocks, block_bytes, link) = case_of(seed);
    let size_bytes = blocks as usize * block_bytes - 8; // the last block a little short
    let name = format!(
        "seed {seed} ({receivers} receivers, {blocks} blocks of {block_bytes} B, {link:?}; \
         rerun: RDMC_COMPLETION_SEED={seed} cargo test -p spindle-group --test rdmc_completion)"
    );
    let mut last = Vec::new();
    for schedule in ScheduleKind::ALL {
        let case = CompletionCase {
            schedule,
            receivers,
            size_bytes,
            block_bytes,
        };
        let c = measure_completion(case, link, RdmcData::Bytes, seed)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(c.first_us <= c.last_us && c.last_us > 0, "{name}: {c:?}");
        last.push(c.last_us as f64);
    }
    let [pipeline, chain, tree, sequential] = last[..] else {
        unreachable!("four schedules")
    };
    let bound = binomial_pipeline_bound_us(receivers + 1, blocks, block_bytes, &link.model());
    assert!(
        pipeline <= 1.2 * bound,
        "{name}: binomial pipeline {pipeline} µs, above 1.2 × the bound {bound:.1} µs"
    );
    assert!(
        pipeline < chain && pipeline < tree && pipeline < sequential,
        "{name}: binomial pipeline {pipeline} µs not the fastest: chain {chain}, \
         tree {tree}, sequential {sequential}"
    );
    assert!(
        sequential > chain && sequential > tree,
        "{name}: sequential {sequential} µs not the slowest: chain {chain}, tree {tree}"
    );
}

#[test]
fn the_binomial_pipeline_meets_the_bound_and_beats_the_other_schedules() {
    match std::env::var("RDMC_COMPLETION_SEED") {
        Ok(seed) => check_seed(seed.parse().expect("RDMC_COMPLETION_SEED is a u64")),
        Err(_) => (1..=SEEDS).for_each(check_seed),
    }
}

#[test]
fn a_case_replays_to_the_same_times_and_trace() {
    let (receivers, blocks, block_bytes, link) = case_of(3);
    let case = CompletionCase {
        schedule: ScheduleKind::BinomialPipeline,
        receivers,
        size_bytes: blocks as usize * block_bytes,
        block_bytes,
    };
    let a = measure_completion(case, link, RdmcData::Bytes, 3).unwrap();
    let b = measure_completion(case, link, RdmcData::Bytes, 3).unwrap();
    assert_eq!(a, b, "case {case:?}");
    // Payload-free block writes move the same lengths at the same times.
    let p = measure_completion(case, link, RdmcData::Phantom, 3).unwrap();
    assert_eq!(
        (p.first_us, p.last_us),
        (a.first_us, a.last_us),
        "case {case:?}"
    );
}
