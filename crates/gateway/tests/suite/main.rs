//! ratelab-gateway's integration tests, one binary: a module per subject.

mod bloom_fpr;
mod key_flood;
