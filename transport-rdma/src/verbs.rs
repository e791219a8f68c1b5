//! The ibverbs backend (feature `verbs`).
