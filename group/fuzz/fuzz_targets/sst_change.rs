//! Fuzzes a membership change as read from a peer's SST row (kind and node word, length
//! word, body): any row contents decode or are refused, never panic.
//!
//! ```text
//! cd group/fuzz && cargo +nightly fuzz run sst_change -- -max_total_time=60
//! ```
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = spindle_group::membership::decode_sst_change(data);
});
