//! `attnviz models`: where the embedded models are found, and `attnviz models install`, which copies
//! them from a source tree into the data folder, so that a binary copied or installed anywhere finds
//! them (docs/architecture.md, "Where the embedded models live").

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{Args, Subcommand};

use crate::model::loader::{
    DEFAULT_MODEL_NAME, SMOLLM2_NAME, data_models_dir, embedded_models, find_models, model_search_path,
    source_tree_models,
};

/// Arguments of `models`.
#[derive(Debug, Args)]
pub struct ModelsArgs {
    /// What to do; none prints where the embedded models are found and where they are looked for.
    #[command(subcommand)]
    pub action: Option<ModelsAction>,
}

/// What `models` does.
#[derive(Debug, Subcommand)]
pub enum ModelsAction {
    /// Copy the embedded models (all-MiniLM-L6-v2, and SmolLM2-135M-Instruct when present) into the
    /// data folder ($XDG_DATA_HOME/attnviz/models, else ~/.local/share/attnviz/models), where a
    /// binary run from any folder finds them.
    Install(InstallArgs),
}

/// Arguments of `models install`.
#[derive(Debug, Args)]
pub struct InstallArgs {
    /// The folder holding the model folders: an attnviz source tree's assets/models (default: the
    /// source tree this binary was built from).
    #[arg(long, value_name = "DIR")]
    pub from: Option<PathBuf>,
    /// The folder to copy them into (default: the data folder).
    #[arg(long, value_name = "DIR")]
    pub to: Option<PathBuf>,
}

/// Runs `models`.
pub fn run(args: &ModelsArgs) -> anyhow::Result<()> {
    match &args.action {
        None => {
            for place in model_search_path() {
                println!("looked in {}", place.display());
            }
            let found = embedded_models()?;
            println!("found {}", found.display());
            Ok(())
        }
        Some(ModelsAction::Install(install)) => {
            let from = install.from.clone().unwrap_or_else(source_tree_models);
            let from = find_models(std::slice::from_ref(&from)).map_err(|_| {
                anyhow::anyhow!(
                    "{} holds no {DEFAULT_MODEL_NAME}/config.json: give the assets/models folder of an attnviz source tree with --from",
                    from.display()
                )
            })?;
            let to = match &install.to {
                Some(to) => to.clone(),
                None => data_models_dir().context("no data folder: set XDG_DATA_HOME or HOME, or give --to")?,
            };
            for name in [DEFAULT_MODEL_NAME, SMOLLM2_NAME] {
                let src = from.join(name);
                if !src.is_dir() {
                    continue;
                }
                copy_model(&src, &to.join(name))?;
                println!("installed {} in {}", name, to.display());
            }
            Ok(())
        }
    }
}

/// Copies the files of `src` into `dst` as a whole: into a temporary folder beside `dst`, renamed
/// into place when complete (a previous copy is replaced only then).
fn copy_model(src: &Path, dst: &Path) -> anyhow::Result<()> {
    let parent = dst.parent().context("the target has no parent folder")?;
    std::fs::create_dir_all(parent).with_context(|| format!("cannot create {}", parent.display()))?;
    let tmp = tempfile::Builder::new()
        .prefix(".attnviz-install-")
        .tempdir_in(parent)
        .with_context(|| format!("cannot write in {}", parent.display()))?;
    let entries = std::fs::read_dir(src).with_context(|| format!("cannot read {}", src.display()))?;
    for entry in entries {
        let entry = entry.with_context(|| format!("cannot read {}", src.display()))?;
        let path = entry.path();
        if !path.is_file() {
            continue;
        }
        let target = tmp.path().join(entry.file_name());
        std::fs::copy(&path, &target)
            .with_context(|| format!("cannot copy {} to {}", path.display(), target.display()))?;
    }
    let old = parent.join(format!(".attnviz-old-{}", std::process::id()));
    let had_old = dst.exists();
    if had_old {
        std::fs::rename(dst, &old).with_context(|| format!("cannot move the old {} aside", dst.display()))?;
    }
    let kept = tmp.keep();
    if let Err(e) = std::fs::rename(&kept, dst) {
        let _ = std::fs::remove_dir_all(&kept);
        if had_old {
            let _ = std::fs::rename(&old, dst);
        }
        return Err(e).with_context(|| format!("cannot move the copy into {}", dst.display()));
    }
    if had_old {
        std::fs::remove_dir_all(&old).with_context(|| format!("cannot remove the old copy {}", old.display()))?;
    }
    Ok(())
}
