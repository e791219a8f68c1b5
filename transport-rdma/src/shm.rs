//! The shm backend: same-host processes map each other's regions.
