//! Fuzzes the tcp/shm wire-frame decoder: any bytes a peer may send must decode to
//! frames or to an error, never panic, hang or allocate without bound.
//!
//! ```text
//! cd transport-rdma/fuzz && cargo +nightly fuzz run frame_decode -- -max_total_time=60
//! ```
#![no_main]

use libfuzzer_sys::fuzz_target;
use spindle_transport_rdma::tcp::decode_frames;

fuzz_target!(|data: &[u8]| {
    let frames = decode_frames(data);
    // Every frame has at least its 5-byte header.
    assert!(frames * 5 <= data.len());
});
