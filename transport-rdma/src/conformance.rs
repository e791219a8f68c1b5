//! The conformance suite every backend must pass (contract items 1–7 of the crate docs).
