//! The official SWE-bench harness's environments for imported rows: its prebuilt instance
//! images (`--images`), or a Dockerfile per repository and version that follows the recipe of
//! its images, and the verify command that runs the tests in either as its eval script does.
//!
//! The recipe is the `swebench` package's (4.1.0, `src/import/swebench_specs.json`): an Ubuntu
//! base with Miniconda in `/opt/miniconda3`; a conda environment `testbed` with the version's
//! Python and packages (conda packages, the repository's requirements file, or its conda
//! environment file) and pip packages; the repository cloned into `/testbed`, its `pre_install`
//! steps and its `install` command run there.

use std::collections::HashMap;

use super::swebench_official::{OFFICIAL, OfficialSpec, test_directives};
use crate::support::shell_quote;

/// Where the images keep the repository, and so where the workspace is mounted.
pub(super) const TESTBED: &str = "/testbed";
/// The Docker Hub namespace of the official instance images.
const NAMESPACE: &str = "docker.io/swebench";
/// The heredoc delimiter the official environment script uses for its requirements.
const HEREDOC: &str = "EOF_59812759871";
/// The lines the official eval script activates the environment with.
const ACTIVATE: &str = "source /opt/miniconda3/bin/activate && conda activate testbed";

/// The official instance image of a row, as the harness names the images it publishes:
/// `swebench/sweb.eval.x86_64.<instance id, lowercased>:latest`, every `__` made `_1776_`
/// (Docker Hub takes no `__` in a name). Fully qualified: a run never pulls and Podman needs
/// the registry to find a short name.
pub(super) fn image_name(instance_id: &str) -> String {
    let key = format!("sweb.eval.x86_64.{}:latest", instance_id.to_lowercase());
    format!("{NAMESPACE}/{key}").replace("__", "_1776_")
}

/// The verify command in an official environment: bash runs what the official eval script runs
/// after the patches are in place: activate `testbed`, the repository edits of `pre_install`
/// (the images hold them committed; the workspace is the bare base commit), the spec's
/// `eval_commands`, its `install` (again, as the eval script does: a non-editable install must
/// see the change, and what an editable one built in place is hidden by the workspace), then
/// the test command with the test patch's files. Like the eval script, a failing step does not
/// stop the next: the test log decides.
pub(super) fn verify_command(spec: &OfficialSpec, repo: &str, test_patch: &str) -> Option<String> {
    let test_cmd = spec.test_cmd.as_deref()?;
    let mut lines = vec![ACTIVATE.to_owned()];
    lines.extend(
        spec.pre_install
            .iter()
            .filter(|line| edits_repository(line))
            .cloned(),
    );
    lines.extend(spec.eval_commands.iter().cloned());
    lines.extend(spec.install.iter().cloned());
    let mut test = vec![test_cmd.to_owned()];
    test.extend(
        test_directives(repo, test_patch)
            .iter()
            .map(|d| shell_quote(d)),
    );
    lines.push(test.join(" "));
    Some(format!("bash -c {}", shell_quote(&lines.join("\n"))))
}

/// A `pre_install` step that edits the repository's files (`sed -i` of `tox.ini`, `setup.py`,
/// `setup.cfg`, `pyproject.toml`, some behind a `grep -q`), not the system (`apt-get`,
/// `locale-gen`, a download).
fn edits_repository(line: &str) -> bool {
    line.starts_with("sed ") || line.starts_with("grep ")
}

/// Why the official environment of a repository's version cannot be written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum EnvironmentError {
    #[error("the official spec of {repo} {version} names no Python version")]
    NoPython { repo: String, version: String },
    #[error("the environment setup commit {commit} is not in {}", clone.display())]
    MissingCommit {
        commit: String,
        clone: std::path::PathBuf,
    },
    /// None of the paths the harness reads the file from is at the commit.
    #[error("no {what} at commit {commit} (looked for {})", looked_for.join(", "))]
    NoFile {
        what: &'static str,
        commit: String,
        looked_for: Vec<String>,
    },
}

/// The files of one generated environment, relative to its folder.
pub(super) type EnvironmentFiles = Vec<(&'static str, String)>;

/// The Dockerfile (and the scripts it runs) of the official image for `repo` at `version`, with
/// the repository at `commit` (the rows' `environment_setup_commit`, else the base). The
/// requirements or conda environment file is read from `tree` (that commit in the local clone),
/// as the harness reads it from GitHub. Err: why it cannot be written.
pub(super) fn dockerfile(
    repo: &str,
    version: &str,
    spec: &OfficialSpec,
    commit: &str,
    git: &git2::Repository,
    tree: &git2::Tree,
) -> Result<EnvironmentFiles, EnvironmentError> {
    let Some(python) = &spec.python else {
        return Err(EnvironmentError::NoPython {
            repo: repo.to_owned(),
            version: version.to_owned(),
        });
    };
    Ok(vec![
        ("Dockerfile", dockerfile_text(repo, version, commit)),
        (
            "setup_env.sh",
            setup_env(repo, python, spec, commit, git, tree)?,
        ),
        ("setup_repo.sh", setup_repo(repo, spec, commit)),
    ])
}

/// `setup_env.sh`: the conda environment `testbed` with the repository's requirements.
fn setup_env(
    repo: &str,
    python: &str,
    spec: &OfficialSpec,
    commit: &str,
    git: &git2::Repository,
    tree: &git2::Tree,
) -> Result<String, EnvironmentError> {
    let mut env = vec![
        "#!/bin/bash".to_owned(),
        "set -euxo pipefail".to_owned(),
        "source /opt/miniconda3/bin/activate".to_owned(),
    ];
    match spec.packages.as_deref().unwrap_or_default() {
        "requirements.txt" => {
            let requirements = requirements(repo, git, tree, commit)?;
            env.push(format!("conda create -n testbed python={python} -y"));
            env.push(format!(
                "cat <<'{HEREDOC}' > $HOME/requirements.txt\n{requirements}\n{HEREDOC}"
            ));
            env.push(
                "conda activate testbed && python -m pip install -r $HOME/requirements.txt"
                    .to_owned(),
            );
            env.push("rm $HOME/requirements.txt".to_owned());
        }
        "environment.yml" => {
            let yml = environment_yml(repo, git, tree, commit)?;
            env.push(format!(
                "cat <<'{HEREDOC}' > environment.yml\n{yml}\n{HEREDOC}"
            ));
            if spec.no_use_env {
                env.push(format!(
                    "conda create -c conda-forge -n testbed python={python} -y"
                ));
                env.push("conda env update -f environment.yml".to_owned());
            } else {
                env.push("conda env create --file environment.yml".to_owned());
                env.push(format!(
                    "conda activate testbed && conda install python={python} -y"
                ));
            }
            env.push("rm environment.yml".to_owned());
        }
        packages => env.push(format!(
            "conda create -n testbed python={python} {packages} -y"
        )),
    }
    env.push("conda activate testbed".to_owned());
    if !spec.pip_packages.is_empty() {
        env.push(format!(
            "python -m pip install {}",
            spec.pip_packages.join(" ")
        ));
    }
    Ok(env.join("\n") + "\n")
}

/// `setup_repo.sh`: the repository at `commit` in the testbed, installed.
fn setup_repo(repo: &str, spec: &OfficialSpec, commit: &str) -> String {
    let mut setup_repo = vec![
        "#!/bin/bash".to_owned(),
        "set -euxo pipefail".to_owned(),
        // Every branch: an older version's commit may be on a release branch only.
        format!("git clone -o origin https://github.com/{repo} {TESTBED}"),
        format!("chmod -R 777 {TESTBED}"),
        format!("cd {TESTBED}"),
        format!("git reset --hard {commit}"),
        "git remote remove origin".to_owned(),
        "source /opt/miniconda3/bin/activate".to_owned(),
        "conda activate testbed".to_owned(),
        "echo \"Current environment: $CONDA_DEFAULT_ENV\"".to_owned(),
    ];
    setup_repo.extend(spec.pre_install.iter().cloned());
    setup_repo.extend(spec.install.iter().cloned());
    setup_repo.join("\n") + "\n"
}

/// The Dockerfile: the official base, environment and instance images in one.
fn dockerfile_text(repo: &str, version: &str, commit: &str) -> String {
    let docker = &OFFICIAL.docker;
    format!(
        "# Written by `deltabench import swebench`: the official SWE-bench harness's image for
# {repo} {version} (swebench 4.1.0's base, environment and instance images in one), with the
# repository at {commit} in {TESTBED} and installed into the conda environment `testbed`.
# The task's workspace is mounted over {TESTBED}. Building it needs the network (apt, Miniconda,
# conda, PyPI and GitHub).
FROM --platform=linux/x86_64 docker.io/library/ubuntu:{ubuntu}

ARG DEBIAN_FRONTEND=noninteractive
ENV TZ=Etc/UTC

RUN apt update && apt install -y \\
wget \\
git \\
build-essential \\
libffi-dev \\
libtiff-dev \\
python3 \\
python3-pip \\
python-is-python3 \\
jq \\
curl \\
locales \\
locales-all \\
tzdata \\
&& rm -rf /var/lib/apt/lists/*

RUN wget 'https://repo.anaconda.com/miniconda/Miniconda3-{conda}-Linux-x86_64.sh' -O miniconda.sh \\
    && bash miniconda.sh -b -p /opt/miniconda3
ENV PATH=/opt/miniconda3/bin:$PATH
RUN conda init --all
RUN conda config --append channels conda-forge

RUN adduser --disabled-password --gecos 'dog' nonroot

COPY ./setup_env.sh ./setup_repo.sh /root/
RUN chmod +x /root/setup_env.sh
RUN /bin/bash -c \"source ~/.bashrc && /root/setup_env.sh\"

WORKDIR {TESTBED}/

RUN echo \"source /opt/miniconda3/etc/profile.d/conda.sh && conda activate testbed\" > /root/.bashrc

RUN /bin/bash /root/setup_repo.sh

WORKDIR {TESTBED}/
",
        ubuntu = docker.ubuntu_version,
        conda = docker.conda_version,
    )
}

/// A file of the repository at the commit: the first of `paths` there, and its path.
/// The first of `paths` the tree holds, with its text; why not, naming `what` and the paths.
fn first_file_or_why<'a>(
    git: &git2::Repository,
    tree: &git2::Tree,
    paths: Option<&'a Vec<String>>,
    what: &'static str,
    commit: &str,
) -> Result<(&'a str, String), EnvironmentError> {
    let paths = paths.map_or(&[][..], Vec::as_slice);
    paths
        .iter()
        .find_map(|path| Some((path.as_str(), read(git, tree, path)?)))
        .ok_or_else(|| EnvironmentError::NoFile {
            what,
            commit: commit.to_owned(),
            looked_for: paths.to_vec(),
        })
}

fn read(git: &git2::Repository, tree: &git2::Tree, path: &str) -> Option<String> {
    let entry = tree.get_path(std::path::Path::new(path)).ok()?;
    let blob = git.find_blob(entry.id()).ok()?;
    Some(String::from_utf8_lossy(blob.content()).into_owned())
}

/// The requirements the harness installs: the repository's requirements file (the first of its
/// paths found), the files its `-r` lines name first, without `-e .`, comments and `.[test`
/// lines, with the packages it replaces replaced.
fn requirements(
    repo: &str,
    git: &git2::Repository,
    tree: &git2::Tree,
    commit: &str,
) -> Result<String, EnvironmentError> {
    let (path, text) = first_file_or_why(
        git,
        tree,
        OFFICIAL.reqs_paths.get(repo),
        "requirements file",
        commit,
    )?;
    let excluded = |line: &str| {
        let line = line.trim();
        ["-e .", "#", ".[test"].iter().any(|x| line.starts_with(x))
    };
    let dir = path.rsplit_once('/').map_or("", |(dir, _)| dir);
    let mut original = Vec::new();
    let mut additional = Vec::new();
    for line in text.split('\n') {
        if let Some(name) = line.trim().strip_prefix("-r") {
            let name = name.trim();
            let nested = if dir.is_empty() {
                name.to_owned()
            } else {
                format!("{dir}/{name}")
            };
            // The harness leaves out a file it cannot fetch.
            if let Some(text) = read(git, tree, &nested) {
                additional.extend(text.split('\n').filter(|l| !excluded(l)).map(str::to_owned));
            }
        } else if !excluded(line) {
            original.push(line.to_owned());
        }
    }
    additional.push(original.join("\n"));
    Ok(replace_packages(&additional.join("\n"), ""))
}

/// The repository's conda environment file (the first of its paths found), named `testbed`.
fn environment_yml(
    repo: &str,
    git: &git2::Repository,
    tree: &git2::Tree,
    commit: &str,
) -> Result<String, EnvironmentError> {
    let (_, text) = first_file_or_why(
        git,
        tree,
        OFFICIAL.env_yml_paths.get(repo),
        "conda environment file",
        commit,
    )?;
    let named: Vec<String> = text
        .split('\n')
        .map(|line| {
            if line.starts_with("name:") {
                "name: testbed".to_owned()
            } else {
                line.to_owned()
            }
        })
        .collect();
    // The harness replaces them in the `pip:` list; a conda package of that name is unheard of.
    Ok(replace_packages(&named.join("\n"), "- "))
}

/// Each line `<indent><marker><package><version spec>` of a package the harness replaces
/// (one yanked from PyPI) becomes its replacement, without the version spec.
fn replace_packages(text: &str, marker: &str) -> String {
    let replacements: HashMap<&str, &str> = OFFICIAL
        .replace_req_packages
        .iter()
        .map(|(from, to)| (from.as_str(), to.as_str()))
        .collect();
    text.split('\n')
        .map(|line| {
            let body = line.trim_start();
            let indent = &line[..line.len() - body.len()];
            let (lead, rest) = match body.strip_prefix(marker.trim_end()) {
                Some(rest) if !marker.is_empty() => {
                    let name = rest.trim_start();
                    (&body[..body.len() - name.len()], name)
                }
                _ if marker.is_empty() => ("", body),
                _ => return line.to_owned(),
            };
            for (from, to) in &replacements {
                if let Some(spec) = rest.strip_prefix(from)
                    && (spec.is_empty() || spec.starts_with(['<', '>', '=', '!', '~']))
                {
                    return format!("{indent}{lead}{to}");
                }
            }
            line.to_owned()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_names_follow_the_official_naming() {
        assert_eq!(
            image_name("django__django-11099"),
            "docker.io/swebench/sweb.eval.x86_64.django_1776_django-11099:latest"
        );
        assert_eq!(
            image_name("Pylint-dev__Astroid-1196"),
            "docker.io/swebench/sweb.eval.x86_64.pylint-dev_1776_astroid-1196:latest"
        );
    }

    #[test]
    fn yanked_packages_are_replaced() {
        assert_eq!(
            replace_packages("a==1\ntypes-pkg_resources==0.1\ntypes-pkg_resourcesx\n", ""),
            "a==1\ntypes-setuptools\ntypes-pkg_resourcesx\n"
        );
        assert_eq!(
            replace_packages(
                "name: testbed\n  - pip:\n    - types-pkg_resources>=1\n    - b\n",
                "- "
            ),
            "name: testbed\n  - pip:\n    - types-setuptools\n    - b\n"
        );
    }
}
