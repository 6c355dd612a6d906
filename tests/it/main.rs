//! One integration-test binary (one link instead of many), as in jj and uv.

mod common;
mod compare;
mod demo;
mod import;
mod lifecycle;
mod reports;
mod seam;
mod shard;
mod suite_errors;
mod workspace;
