//! The agents deltabench ships: `noop`, `oracle`, `mock` and `command` (bring your own harness).

pub(crate) mod agent_events;
pub(crate) mod command;
pub(crate) mod mock;
pub(crate) mod noop;
pub(crate) mod oracle;
