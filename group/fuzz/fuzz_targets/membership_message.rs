//! Fuzzes the membership messages (join, redirect, new view, state transfer, declaration)
//! a peer sends: any bytes decode or are refused, never panic or allocate without bound.
//!
//! ```text
//! cd group/fuzz && cargo +nightly fuzz run membership_message -- -max_total_time=60
//! ```
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = spindle_group::group::decode_membership_message(data);
});
