//! Atomic file writes: a temporary file in the target folder, renamed into place when complete.

use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use thiserror::Error;

/// A file that could not be written; the target is left as it was.
#[derive(Debug, Error)]
#[error("cannot write {}: {source}", path.display())]
pub struct WriteError {
    /// The file that was to be written.
    pub path: PathBuf,
    /// What went wrong.
    #[source]
    pub source: std::io::Error,
}

/// Writes `path` through `fill`, so that it either appears complete or not at all.
pub fn write_atomic(
    path: &Path,
    fill: impl FnOnce(&mut BufWriter<&mut std::fs::File>) -> std::io::Result<()>,
) -> Result<(), WriteError> {
    let wrap = |source| WriteError { path: path.to_path_buf(), source };
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    if path.is_dir() {
        return Err(wrap(std::io::Error::new(std::io::ErrorKind::IsADirectory, "it is a folder")));
    }
    let mut tmp = tempfile::Builder::new().prefix(".attnviz-").suffix(".tmp").tempfile_in(dir).map_err(wrap)?;
    {
        let mut w = BufWriter::new(tmp.as_file_mut());
        fill(&mut w).map_err(wrap)?;
        w.flush().map_err(wrap)?;
    }
    tmp.as_file().sync_all().map_err(wrap)?;
    set_permissions(tmp.as_file(), path).map_err(wrap)?;
    tmp.persist(path).map_err(|e| wrap(e.error))?;
    Ok(())
}

/// Gives the new file the permissions of the file it replaces, or the usual 0644 for a new file
/// (the temporary file is created private, 0600).
#[cfg(unix)]
fn set_permissions(file: &std::fs::File, target: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(target).map_or(0o644, |m| m.permissions().mode() & 0o7777);
    file.set_permissions(std::fs::Permissions::from_mode(mode))
}

#[cfg(not(unix))]
fn set_permissions(_file: &std::fs::File, _target: &Path) -> std::io::Result<()> {
    Ok(())
}

/// Writes `bytes` to `path` atomically.
pub fn write_bytes_atomic(path: &Path, bytes: &[u8]) -> Result<(), WriteError> {
    write_atomic(path, |w| w.write_all(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_fill_leaves_the_old_file_and_no_temporaries() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.txt");
        std::fs::write(&path, "old").unwrap();
        let err = write_atomic(&path, |w| {
            w.write_all(b"partial")?;
            Err(std::io::Error::other("boom"))
        })
        .unwrap_err();
        assert!(err.to_string().contains("out.txt"));
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "old");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[cfg(unix)]
    #[test]
    fn new_files_are_world_readable_and_replaced_files_keep_their_mode() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("new.png");
        write_bytes_atomic(&path, b"x").unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o644);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        write_bytes_atomic(&path, b"y").unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(std::fs::read(&path).unwrap(), b"y");
    }

    #[test]
    fn missing_folder_is_an_error_naming_the_path() {
        let err = write_bytes_atomic(Path::new("/nonexistent-dir/x.png"), b"x").unwrap_err();
        assert!(err.to_string().contains("/nonexistent-dir/x.png"));
    }
}
