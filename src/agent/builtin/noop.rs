//! `noop`: completes at once and changes nothing. The floor every suite should fail.

use crate::agent::{CodingAgent, CodingHandle, CodingResult, CodingTask, new_session_id};

/// An agent that does nothing and reports success.
#[derive(Debug, Clone)]
pub struct NoopAgent {
    name: String,
}

impl Default for NoopAgent {
    fn default() -> Self {
        Self {
            name: "noop".to_owned(),
        }
    }
}

impl NoopAgent {
    /// A noop agent under another name (its tool form is named after it).
    pub fn named(name: impl Into<String>) -> Self {
        Self { name: name.into() }
    }
}

impl CodingAgent for NoopAgent {
    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> &str {
        "Completes at once without changing anything."
    }

    fn run(&self, task: CodingTask) -> CodingHandle {
        let session = task.session_id.clone().unwrap_or_else(new_session_id);
        CodingHandle::spawn(&self.name, &task, false, |_ctx| async move {
            CodingResult::completed(session)
        })
    }
}
