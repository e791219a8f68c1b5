//! Fuzzes the state-transfer blob a joiner receives (a subgroup's history store, as a
//! member snapshots it): any bytes give a store or an error, never a panic or an
//! allocation the blob does not pay for.
//!
//! ```text
//! cd dds-core/fuzz && cargo +nightly fuzz run state_transfer -- -max_total_time=60
//! ```
#![no_main]

use libfuzzer_sys::fuzz_target;
use spindle_dds_core::store::Store;

fuzz_target!(|data: &[u8]| {
    // The first byte picks the history depth the receiving topic keeps.
    let (depth, blob) = match data.split_first() {
        Some((d, rest)) => (u16::from(*d), rest),
        None => (1, data),
    };
    if let Ok(store) = Store::from_snapshot(blob, depth) {
        // What decoded re-encodes to a blob that decodes again.
        assert!(Store::from_snapshot(&store.snapshot(), depth).is_ok());
    }
});
