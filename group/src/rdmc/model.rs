//! A virtual-time model of a schedule run the way RDMC runs it (RDMC §4.2: asynchronous
//! steps, a send waits only for its block and for the two NICs involved), with one link
//! model for every node: each node's NIC sends one block at a time and receives one block
//! at a time at `link_bytes_per_s`, and every transfer adds `latency_us`.
//!
//! This is a model of the schedules, not the sim fabric: it answers "how long does this
//! schedule take on NICs of this speed", which the paper's analysis (§4.4) states in
//! block steps: the binomial pipeline needs `k + ceil(log2 n) - 1` steps of one block
//! time each ([`binomial_pipeline_bound_us`]). The real `RdmcGroup` on the sim fabric's
//! bandwidth model (`crate::rdmc_sim::measure_completion`, feature `testkit`) is
//! checked against it: the example `rdmc_sim_table` prints this model's figure beside
//! each run. It differs where the run's first-come NICs serve transfers in another order
//! than the schedule's steps (docs/benchmarks.md).
//!
//! ```
//! use spindle_group::rdmc::model::{binomial_pipeline_bound_us, completion_us, LinkModel};
//! use spindle_group::rdmc::ScheduleKind;
//!
//! let link = LinkModel { link_bytes_per_s: 12_500_000_000, latency_us: 1.0 };
//! let (members, blocks, block_bytes) = (16, 16, 1 << 20);
//! let pipeline = completion_us(ScheduleKind::BinomialPipeline, members, blocks, block_bytes, &link)?;
//! let sequential = completion_us(ScheduleKind::Sequential, members, blocks, block_bytes, &link)?;
//! assert!(pipeline <= binomial_pipeline_bound_us(members, blocks, block_bytes, &link));
//! assert!(pipeline * 5.0 < sequential);
//! # Ok::<(), spindle_group::Error>(())
//! ```

use super::schedule::{log2_ceil, Schedule, ScheduleKind};
use crate::Result;

/// Every node's NIC, in the model.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinkModel {
    /// Bytes per second one NIC sends (and, separately, receives).
    pub link_bytes_per_s: u64,
    /// Added to every block transfer (wire and software), in µs.
    pub latency_us: f64,
}

impl LinkModel {
    /// The time one block of `block_bytes` occupies a NIC, in µs.
    pub fn block_us(&self, block_bytes: usize) -> f64 {
        block_bytes as f64 * 1e6 / self.link_bytes_per_s as f64
    }
}

/// The paper's bound for the binomial pipeline: `k + ceil(log2 n) - 1` steps of one
/// block time plus latency each, in µs.
pub fn binomial_pipeline_bound_us(
    members: u32,
    blocks: u32,
    block_bytes: usize,
    link: &LinkModel,
) -> f64 {
    if members <= 1 {
        return 0.0;
    }
    let steps = blocks as f64 + log2_ceil(members) as f64 - 1.0;
    steps * (link.block_us(block_bytes) + link.latency_us)
}

/// When the last member holds the last block, in µs after the root starts, for `blocks`
/// blocks of `block_bytes` among `members` members (the root included) on `kind`.
pub fn completion_us(
    kind: ScheduleKind,
    members: u32,
    blocks: u32,
    block_bytes: usize,
    link: &LinkModel,
) -> Result<f64> {
    let schedule = Schedule::new(kind, members, blocks)?;
    Ok(run(&schedule, block_bytes, link))
}

/// [`completion_us`] of a schedule already computed.
pub fn run(schedule: &Schedule, block_bytes: usize, link: &LinkModel) -> f64 {
    let (n, k) = (schedule.members() as usize, schedule.blocks() as usize);
    let block_us = link.block_us(block_bytes);
    let mut send_free = vec![0.0f64; n];
    let mut recv_free = vec![0.0f64; n];
    // When each member holds each block (the root holds all at 0).
    let mut held_at = vec![f64::INFINITY; n * k];
    held_at[..k].fill(0.0);
    let mut done: f64 = 0.0;
    // Steps in order: a transfer's predecessors on its sender's and receiver's queues,
    // and the transfer that brought its block, all belong to earlier steps.
    for step in schedule.steps() {
        for t in step {
            let (a, b, x) = (t.from as usize, t.to as usize, t.block as usize);
            let ready = held_at[a * k + x];
            // Invariant: a schedule only sends a block its sender already holds.
            assert!(
                ready.is_finite(),
                "rank {a} sends block {x} before holding it"
            );
            let start = send_free[a].max(recv_free[b]).max(ready);
            send_free[a] = start + block_us;
            recv_free[b] = start + block_us;
            let arrive = start + block_us + link.latency_us;
            held_at[b * k + x] = arrive;
            done = done.max(arrive);
        }
    }
    done
}

#[cfg(test)]
mod tests {
    use super::*;

    const LINK: LinkModel = LinkModel {
        link_bytes_per_s: 12_500_000_000,
        latency_us: 1.0,
    };

    #[test]
    fn binomial_pipeline_is_within_the_papers_bound_and_beats_the_others_for_many_blocks() {
        for n in [2u32, 3, 4, 5, 8, 13, 16, 33, 64] {
            for k in [1u32, 4, 16, 64] {
                let bp =
                    completion_us(ScheduleKind::BinomialPipeline, n, k, 1 << 20, &LINK).unwrap();
                let bound = binomial_pipeline_bound_us(n, k, 1 << 20, &LINK);
                assert!(bp <= bound * 1.2, "n={n} k={k}: {bp} vs bound {bound}");
                let seq = completion_us(ScheduleKind::Sequential, n, k, 1 << 20, &LINK).unwrap();
                let tree = completion_us(ScheduleKind::BinomialTree, n, k, 1 << 20, &LINK).unwrap();
                let chain = completion_us(ScheduleKind::Chain, n, k, 1 << 20, &LINK).unwrap();
                // RDMC §4.3 / Figure 4: with several blocks never worse than sequential or
                // tree, and strictly better beyond four members; better than the chain
                // once the chain is long and the message short. (With one block a relay
                // hop costs a latency that the root's direct sends do not pay.)
                if k >= 4 {
                    assert!(bp <= seq * 1.0001 && bp <= tree * 1.0001, "n={n} k={k}");
                }
                if n > 4 && k >= 4 {
                    assert!(bp < seq && bp < tree, "n={n} k={k}");
                }
                if n >= 16 && k <= 16 {
                    assert!(bp < chain, "n={n} k={k}: {bp} vs chain {chain}");
                }
            }
        }
    }

    #[test]
    fn one_block_to_one_receiver_takes_one_block_time() {
        let t = completion_us(ScheduleKind::BinomialPipeline, 2, 1, 1 << 20, &LINK).unwrap();
        assert_eq!(t, LINK.block_us(1 << 20) + LINK.latency_us);
        assert_eq!(
            completion_us(ScheduleKind::Chain, 1, 3, 8, &LINK).unwrap(),
            0.0
        );
    }
}
