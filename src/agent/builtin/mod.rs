//! The agents deltabench ships: `noop`, `oracle`, `mock` and `command` (bring your own harness).

pub mod agent_events;
pub mod command;
pub mod mock;
pub mod noop;
pub mod oracle;
