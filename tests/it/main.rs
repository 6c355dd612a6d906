//! One integration-test binary (one link instead of many), as in jj and uv.

mod common;
mod compare;
mod demo;
mod lifecycle;
mod reports;
mod seam;
mod suite_errors;
mod workspace;
