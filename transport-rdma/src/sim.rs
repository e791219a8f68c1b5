//! The deterministic in-process simulator backend.
