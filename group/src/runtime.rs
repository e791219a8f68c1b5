//! Runtime (placeholder being written).
