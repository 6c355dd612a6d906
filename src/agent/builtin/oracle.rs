//! `oracle`: applies the task's reference solution. The ceiling every suite should reach.

use std::path::PathBuf;

use crate::agent::{
    CodingAgent, CodingError, CodingHandle, CodingResult, CodingTask, ErrorCode, StreamEvent,
    new_session_id,
};
use crate::workspace::{Overlay, apply_overlay};

/// Writes the task's `solution` (a patch or a directory) over the workspace.
#[derive(Debug, Clone)]
pub struct OracleAgent {
    workspace: PathBuf,
    base: String,
    solution: Option<Overlay>,
}

impl OracleAgent {
    /// An oracle writing `solution` over `workspace`; `base` is the commit a patch applies to.
    /// With no solution the run fails.
    pub fn new(workspace: PathBuf, base: String, solution: Option<Overlay>) -> Self {
        Self {
            workspace,
            base,
            solution,
        }
    }
}

impl CodingAgent for OracleAgent {
    fn name(&self) -> &str {
        "oracle"
    }

    fn description(&self) -> &str {
        "Applies the task's reference solution."
    }

    fn run(&self, task: CodingTask) -> CodingHandle {
        let session = task.session_id.clone().unwrap_or_else(new_session_id);
        let agent = self.clone();
        CodingHandle::spawn("oracle", &task, false, move |ctx| async move {
            let Some(solution) = agent.solution.clone() else {
                return CodingResult::failed(
                    session,
                    CodingError::new(ErrorCode::SdkError, "the task has no `solution` to apply"),
                );
            };
            let (workspace, base) = (agent.workspace.clone(), agent.base.clone());
            let applied = tokio::task::spawn_blocking(move || {
                apply_overlay(&workspace, &base, &solution, None)
            })
            .await;
            match applied {
                Ok(Ok(files)) => {
                    for path in &files {
                        ctx.emit(StreamEvent::ToolCall {
                            id: None,
                            name: "write".into(),
                            args: serde_json::json!({ "path": path }),
                        })
                        .await;
                    }
                    let mut result = CodingResult::completed(session);
                    result.output.text = Some(format!(
                        "applied the reference solution ({} files)",
                        files.len()
                    ));
                    result.output.modified_files = files;
                    result
                }
                Ok(Err(err)) => CodingResult::failed(
                    session,
                    CodingError::new(
                        ErrorCode::SdkError,
                        format!("cannot apply the solution: {err}"),
                    ),
                ),
                Err(err) => CodingResult::failed(
                    session,
                    CodingError::new(
                        ErrorCode::SdkError,
                        format!("cannot apply the solution: {err}"),
                    ),
                ),
            }
        })
    }
}
