//! Hamlyn's sans-IO interface logic (placeholder until the core lands).
#![forbid(unsafe_code)]
