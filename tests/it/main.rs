//! One integration-test binary (one link instead of many), as in jj and uv.

mod common;
mod compare;
mod crash;
mod demo;
mod import;
mod lifecycle;
mod procs;
mod reports;
mod sandbox;
mod seam;
mod shard;
mod suite_errors;
mod trust;
mod workspace;
