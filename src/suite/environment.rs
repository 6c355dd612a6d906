//! A task's `environment:`, the container its commands run in: each key checked on its own.

use std::path::{Path, PathBuf};

use serde_saphyr::Spanned;

use super::diagnostics::{Errors, Source, SuiteError};
use super::raw::{RawEnvironment, loc};
use super::read::Lost;
use crate::workspace::{DEFAULT_WORKDIR, DeltaScope, Environment, ImageSource, Limits, Network};

/// The least memory the container runtimes accept.
const LEAST_MEMORY: u64 = 6 << 20;

/// A task's `environment:`, each key checked; None when any is wrong, every error kept.
pub(super) fn environment(
    source: &Source,
    e: &Spanned<RawEnvironment>,
    lost: &Lost,
    errors: &mut Errors,
) -> Option<Environment> {
    let raw = &e.value;
    let found = errors.count();
    let image = image(source, e, lost, errors);
    let workdir = errors.keep(workdir(source, raw.workdir.as_ref()));
    let network = errors.keep(network(source, raw.network.as_ref()));
    let millicpus = errors.keep(millicpus(source, raw.cpus.as_ref()));
    let memory = errors.keep(memory(source, raw.memory.as_ref()));
    let delta = errors.keep(delta(source, raw.delta.as_ref()));
    let verify_network = errors.keep(verify_network(source, raw.verify_network.as_ref()));
    let verify_mounts = verify_mounts(source, raw.verify_mounts.as_ref(), errors);
    let solution_at = raw.solution_at.as_ref().map(|at| {
        errors.keep(absolute(source, at, &at.value, "solution_at"));
        PathBuf::from(&at.value)
    });
    let outputs = outputs(source, raw.outputs.as_ref(), errors);
    if errors.count() > found {
        return None;
    }
    Some(Environment {
        image: image?,
        workdir: workdir?,
        network: network?,
        limits: Limits {
            millicpus: millicpus?,
            memory: memory?,
        },
        delta: delta?,
        verify_network: verify_network?,
        verify_mounts,
        solution_at,
        outputs,
    })
}

/// Exactly one of `image` and `dockerfile`; `context` only with a `dockerfile`.
fn image(
    source: &Source,
    e: &Spanned<RawEnvironment>,
    lost: &Lost,
    errors: &mut Errors,
) -> Option<ImageSource> {
    let raw = &e.value;
    match (&raw.image, &raw.dockerfile) {
        (Some(image), None) => {
            if let Some(context) = &raw.context {
                errors.push(source.at(
                    context,
                    "`context` applies to a `dockerfile` environment, not an `image` one",
                ));
            }
            errors.keep(image_name(source, image))
        }
        (None, Some(dockerfile)) => {
            errors.keep(dockerfile_image(source, dockerfile, raw.context.as_ref()))
        }
        (Some(_), Some(dockerfile)) => {
            errors.push(source.at(
                dockerfile,
                "the environment sets both `image` and `dockerfile`; keep exactly one",
            ));
            None
        }
        (None, None) => {
            if !lost.keys_near(loc(e)) {
                errors.push(source.at(
                    e,
                    "the environment needs exactly one of `image` (a local image name) and `dockerfile` (a path)",
                ));
            }
            None
        }
    }
}

/// A local image's name: not empty, no whitespace inside.
fn image_name(source: &Source, image: &Spanned<String>) -> Result<ImageSource, SuiteError> {
    let name = image.value.trim();
    if name.is_empty() || name.chars().any(char::is_whitespace) {
        return Err(source.at(
            image,
            format!(
                "invalid image name '{}': use a local image such as localhost/NAME:TAG",
                image.value
            ),
        ));
    }
    Ok(ImageSource::Image(name.to_owned()))
}

/// A `dockerfile:` environment's Dockerfile and build context, which must exist.
fn dockerfile_image(
    source: &Source,
    dockerfile: &Spanned<String>,
    context: Option<&Spanned<String>>,
) -> Result<ImageSource, SuiteError> {
    let path = source.existing_path(dockerfile, "dockerfile")?;
    if !path.is_file() {
        return Err(source.at(
            dockerfile,
            format!("dockerfile '{}' is not a file", dockerfile.value),
        ));
    }
    let path = path.canonicalize().unwrap_or(path);
    let context = match context {
        Some(context) => {
            let dir = source.existing_path(context, "context")?;
            if !dir.is_dir() {
                return Err(source.at(
                    context,
                    format!("context '{}' is not a folder", context.value),
                ));
            }
            dir.canonicalize().unwrap_or(dir)
        }
        None => path.parent().map(Path::to_owned).unwrap_or_default(),
    };
    Ok(ImageSource::Dockerfile { path, context })
}

/// `workdir`: an absolute folder other than `/`.
fn workdir(source: &Source, w: Option<&Spanned<String>>) -> Result<PathBuf, SuiteError> {
    match w {
        Some(w) if w.value.starts_with('/') && w.value.trim() != "/" => Ok(PathBuf::from(&w.value)),
        Some(w) => Err(source.at(
            w,
            format!(
                "invalid workdir '{}': use an absolute folder other than /, such as {DEFAULT_WORKDIR}",
                w.value
            ),
        )),
        None => Ok(PathBuf::from(DEFAULT_WORKDIR)),
    }
}

/// `network`: none or host; `model` is an agent's.
fn network(source: &Source, n: Option<&Spanned<String>>) -> Result<Network, SuiteError> {
    let Some(n) = n else {
        return Ok(Network::None);
    };
    match n.value.parse::<Network>() {
        Ok(Network::Model) => Err(source.at(
            n,
            "network `model` is an agent's setting (set it on the agent, for this \
             container too), not an environment's. Valid networks for an environment: \
             none, host",
        )),
        Ok(network) => Ok(network),
        Err(_) => Err(source.at(
            n,
            format!(
                "unknown network mode: '{}'. Valid networks for an environment: none, host",
                n.value
            ),
        )),
    }
}

/// `cpus`, in thousandths of a CPU: from 0.001 to 4096.
fn millicpus(source: &Source, c: Option<&Spanned<f64>>) -> Result<Option<u32>, SuiteError> {
    match c {
        Some(c) if c.value.is_finite() && c.value >= 0.001 && c.value <= 4096.0 => {
            Ok(Some((c.value * 1000.0).round() as u32))
        }
        Some(c) => Err(source.at(
            c,
            format!(
                "invalid cpus {}: use a number above 0, such as 2 or 0.5",
                c.value
            ),
        )),
        None => Ok(None),
    }
}

/// `memory`, in bytes: a size of at least [`LEAST_MEMORY`].
fn memory(source: &Source, m: Option<&Spanned<String>>) -> Result<Option<u64>, SuiteError> {
    let Some(m) = m else {
        return Ok(None);
    };
    match m.value.trim().parse::<bytesize::ByteSize>() {
        Ok(size) if size.as_u64() >= LEAST_MEMORY => Ok(Some(size.as_u64())),
        _ => Err(source.at(
            m,
            format!(
                "invalid memory '{}': use a size of at least 6MiB (the runtimes' least), such as 512MiB or 2GB",
                m.value
            ),
        )),
    }
}

/// `delta`: workspace or container.
fn delta(source: &Source, d: Option<&Spanned<String>>) -> Result<DeltaScope, SuiteError> {
    match d.map(|d| (d, d.value.as_str())) {
        None | Some((_, "workspace")) => Ok(DeltaScope::Workspace),
        Some((_, "container")) => Ok(DeltaScope::Container),
        Some((d, other)) => Err(source.at(
            d,
            format!("unknown delta '{other}'. Valid deltas: workspace, container"),
        )),
    }
}

/// `verify_network`: none or host.
fn verify_network(source: &Source, n: Option<&Spanned<String>>) -> Result<Network, SuiteError> {
    match n.map(|n| (n, n.value.as_str())) {
        None | Some((_, "none")) => Ok(Network::None),
        Some((_, "host")) => Ok(Network::Host),
        Some((n, other)) => Err(source.at(
            n,
            format!(
                "unknown verify_network '{other}'. Valid networks for the verify command: none, host"
            ),
        )),
    }
}

/// `verify_mounts`: absolute container paths, each from a folder of the workspace.
fn verify_mounts(
    source: &Source,
    mounts: Option<&Spanned<std::collections::BTreeMap<String, String>>>,
    errors: &mut Errors,
) -> Vec<(PathBuf, PathBuf)> {
    let Some(mounts) = mounts else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for (inside, from) in &mounts.value {
        errors.keep(absolute(source, mounts, inside, "verify_mounts path"));
        if from.starts_with('/') || from.split('/').any(|p| p == "..") {
            errors.push(source.at(
                mounts,
                format!(
                    "invalid verify_mounts source '{from}' for {inside}: use a folder of the workspace, without a leading / or `..`"
                ),
            ));
        }
        found.push((
            PathBuf::from(inside),
            PathBuf::from(from.trim_start_matches("./")),
        ));
    }
    found
}

/// `outputs`: absolute container globs.
fn outputs(
    source: &Source,
    globs: Option<&Spanned<Vec<String>>>,
    errors: &mut Errors,
) -> Vec<String> {
    let Some(globs) = globs else {
        return Vec::new();
    };
    for glob in &globs.value {
        errors.keep(absolute(source, globs, glob, "outputs glob"));
    }
    globs.value.clone()
}

/// `path`, the value of `key` written at `at`, is an absolute container path other than `/`.
fn absolute<T>(source: &Source, at: &Spanned<T>, path: &str, key: &str) -> Result<(), SuiteError> {
    if path.starts_with('/') && !path.trim_end_matches('/').is_empty() {
        return Ok(());
    }
    Err(source.at(
        at,
        format!(
            "invalid {key} '{path}': use an absolute container path other than /, such as /tests"
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spanned<T: serde::de::DeserializeOwned>(yaml: &str) -> Spanned<T> {
        serde_saphyr::from_str(yaml).unwrap()
    }

    fn said<T: std::fmt::Debug>(result: Result<T, SuiteError>) -> String {
        match result.unwrap_err() {
            SuiteError::At { message, .. } => message,
            other => other.to_string(),
        }
    }

    #[test]
    fn each_key_takes_its_valid_values_and_names_them_otherwise() {
        let source = Source::new(Path::new("/s/suite.yaml"), "x\n");
        let at = |yaml| Some(spanned::<String>(yaml));
        assert_eq!(workdir(&source, None).unwrap(), Path::new(DEFAULT_WORKDIR));
        assert!(said(workdir(&source, at("/").as_ref())).contains("other than /"));
        assert_eq!(
            network(&source, at("host").as_ref()).unwrap(),
            Network::Host
        );
        assert!(said(network(&source, at("model").as_ref())).contains("an agent's setting"));
        assert_eq!(
            millicpus(&source, Some(&spanned("0.5"))).unwrap(),
            Some(500)
        );
        assert!(millicpus(&source, Some(&spanned("0"))).is_err());
        assert_eq!(
            memory(&source, at("6MiB").as_ref()).unwrap(),
            Some(LEAST_MEMORY)
        );
        assert!(memory(&source, at("5MiB").as_ref()).is_err());
        assert_eq!(
            delta(&source, at("container").as_ref()).unwrap(),
            DeltaScope::Container
        );
        assert_eq!(
            said(delta(&source, at("all").as_ref())),
            "unknown delta 'all'. Valid deltas: workspace, container"
        );
        assert_eq!(verify_network(&source, None).unwrap(), Network::None);
        assert!(verify_network(&source, at("model").as_ref()).is_err());
        let key = spanned::<String>("k");
        assert!(absolute(&source, &key, "/tests", "k").is_ok());
        assert!(absolute(&source, &key, "//", "k").is_err());
        assert!(absolute(&source, &key, "tests", "k").is_err());
    }
}
