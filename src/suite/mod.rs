//! Suite files: YAML in, a validated [`Suite`] out, or an error with file, line and column.
//!
//! Loading is two steps, as in ripgrep's low/high argument split: [`raw`] records the YAML as
//! written (with locations), and [`load`] checks every value (paths exist, durations parse,
//! strategies and kinds are known, ids are unique) before anything runs.
//!
//! - `types`: the validated suite, tasks and agent specs;
//! - `diagnostics`: errors located in the file, with a snippet;
//! - `read`: the YAML into the raw types, every error of its shape found;
//! - `indentation`: a syntax error that is a broken indentation, in plain words;
//! - `load`: the suite file;
//! - `task`: one task's values;
//! - `environment`: a task's container;
//! - `agents`: one agent's keys by kind;
//! - `matrix`: ablation matrices expanded into agents;
//! - `lock`: the validated evidence beside the suite.

mod agents;
mod diagnostics;
mod environment;
mod indentation;
mod load;
mod lock;
mod matrix;
mod names;
mod raw;
mod read;
mod task;
mod types;

pub use agents::BUILTIN_AGENTS;
pub use diagnostics::SuiteError;
pub use load::{hash_tree, load, suite_file};
pub use lock::{
    FlakyTask, LockError, SuiteLock, lock_path, lock_path_of, suite_root, task_digest, unvalidated,
};
pub use matrix::MATRIX_FACTORS;
pub use types::{
    AgentSpec, AgentVariant, DEFAULT_MAX_DIFF, Located, MetricKind, MetricSpec, Suite, Task,
    agent_configs, json_schema,
};
