//! One integration-test binary (one link instead of many), as in jj and uv.

mod agents;
mod common;
mod compare;
mod crash;
mod demo;
mod exits;
mod gaming;
mod hostile;
mod import;
mod init;
mod lifecycle;
mod model;
mod procs;
mod redaction;
mod reports;
mod sandbox;
mod sandbox_reach;
mod seam;
mod shard;
mod suite_errors;
mod tampered;
mod trust;
mod validate;
mod workspace;
