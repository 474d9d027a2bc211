//! An output file that appears whole or not at all.
//!
//! It is written unnamed (Linux `O_TMPFILE` in the destination's
//! directory) and given its name only once it is complete and synced: a
//! process killed half-way, even with `SIGKILL`, leaves nothing behind, and
//! a reader never sees a file without its footer. Where the file system has
//! no unnamed files, it is written as `.NAME.partial` beside the
//! destination and renamed over it at the end (a kill then leaves that
//! hidden partial file, never a truncated `NAME`). An existing file of the
//! same name is replaced atomically.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, CWD, Mode, OFlags};

use crate::table::ExportError;

/// A file under way; [`OutputFile::persist`] names it.
#[derive(Debug)]
pub struct OutputFile {
    /// `None` once persisted.
    file: Option<BufWriter<File>>,
    path: PathBuf,
    /// The named partial file, when unnamed files were not available.
    partial: Option<PathBuf>,
}

fn io_error(path: &Path, error: impl std::fmt::Display) -> ExportError {
    ExportError::Io {
        path: path.display().to_string(),
        message: error.to_string(),
    }
}

impl OutputFile {
    /// Starts the file that will be `path`.
    ///
    /// # Errors
    /// [`ExportError::Io`] when its directory cannot take a file.
    pub fn create(path: &Path) -> Result<Self, ExportError> {
        let dir = match path.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
            _ => PathBuf::from("."),
        };
        if path.is_dir() {
            return Err(io_error(path, "is a directory"));
        }
        // An unnamed file is named later through `/proc/self/fd`: without
        // procfs, the named partial file is the way.
        let unnamed = if Path::new("/proc/self/fd").is_dir() {
            rustix::fs::openat(
                CWD,
                &dir,
                OFlags::TMPFILE | OFlags::WRONLY | OFlags::CLOEXEC,
                Mode::from_raw_mode(0o644),
            )
        } else {
            Err(rustix::io::Errno::NOTSUP)
        };
        let (file, partial) = match unnamed {
            Ok(fd) => (File::from(fd), None),
            Err(rustix::io::Errno::NOENT | rustix::io::Errno::NOTDIR) => {
                return Err(io_error(&dir, "no such directory"));
            }
            Err(_) => {
                let name = path
                    .file_name()
                    .ok_or_else(|| io_error(path, "not a file name"))?;
                let partial = dir.join(format!(".{}.partial", name.to_string_lossy()));
                let file = File::create(&partial).map_err(|e| io_error(&partial, e))?;
                (file, Some(partial))
            }
        };
        Ok(Self {
            file: Some(BufWriter::with_capacity(1 << 20, file)),
            path: path.to_path_buf(),
            partial,
        })
    }

    /// The name the file will have.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Syncs the whole file and gives it its name (replacing a file of that
    /// name); its size in bytes.
    ///
    /// # Errors
    /// [`ExportError::Io`] when it cannot be written, synced or named.
    pub fn persist(mut self) -> Result<u64, ExportError> {
        let path = self.path.clone();
        let file = self
            .file
            .take()
            .ok_or_else(|| io_error(&path, "already persisted"))?
            .into_inner()
            .map_err(|e| io_error(&path, e.error()))?;
        file.sync_all().map_err(|e| io_error(&path, e))?;
        let bytes = file.metadata().map_err(|e| io_error(&path, e))?.len();
        match self.partial.take() {
            Some(partial) => {
                std::fs::rename(&partial, &path).map_err(|e| io_error(&path, e))?;
            }
            None => link(&file, &path)?,
        }
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            // The new name itself made durable.
            if let Ok(dir) = File::open(dir) {
                let _ = dir.sync_all();
            }
        }
        Ok(bytes)
    }
}

/// Names the unnamed `file` as `path`, atomically replacing what is there.
fn link(file: &File, path: &Path) -> Result<(), ExportError> {
    use std::os::fd::AsRawFd as _;
    let source = format!("/proc/self/fd/{}", file.as_raw_fd());
    match rustix::fs::linkat(CWD, &source, CWD, path, AtFlags::SYMLINK_FOLLOW) {
        Ok(()) => Ok(()),
        Err(rustix::io::Errno::EXIST) => {
            // Named beside it first, then renamed over it: readers of the
            // old file see the old or the new one, whole.
            let name = path
                .file_name()
                .ok_or_else(|| io_error(path, "not a file name"))?;
            let aside = path.with_file_name(format!(
                ".{}.{}.new",
                name.to_string_lossy(),
                std::process::id()
            ));
            rustix::fs::linkat(CWD, &source, CWD, &aside, AtFlags::SYMLINK_FOLLOW)
                .map_err(|e| io_error(&aside, e))?;
            std::fs::rename(&aside, path).map_err(|e| io_error(path, e))
        }
        Err(error) => Err(io_error(path, error)),
    }
}

impl OutputFile {
    fn open(&mut self) -> std::io::Result<&mut BufWriter<File>> {
        self.file
            .as_mut()
            .ok_or_else(|| std::io::Error::other("the file is already persisted"))
    }
}

impl Write for OutputFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.open()?.write(buf)
    }

    fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        self.open()?.write_all(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.open()?.flush()
    }
}

impl Drop for OutputFile {
    /// A file given up on (an error, a replay stopped) leaves nothing: the
    /// unnamed one goes with its descriptor, a named partial one is removed.
    fn drop(&mut self) {
        if let Some(partial) = self.partial.take() {
            let _ = std::fs::remove_file(partial);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_has_its_name_only_once_persisted_and_replaces_an_older_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.csv");
        let mut file = OutputFile::create(&path).unwrap();
        file.write_all(b"first").unwrap();
        assert!(!path.exists(), "named before it is whole");
        assert_eq!(file.persist().unwrap(), 5);
        assert_eq!(std::fs::read(&path).unwrap(), b"first");

        let mut second = OutputFile::create(&path).unwrap();
        second.write_all(b"second").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"first");
        second.persist().unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"second");
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 1, "nothing left beside it");
    }

    #[test]
    fn a_file_dropped_before_it_is_whole_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.parquet");
        let mut file = OutputFile::create(&path).unwrap();
        file.write_all(&[0u8; 4096]).unwrap();
        drop(file);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn a_missing_directory_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let error = OutputFile::create(&dir.path().join("no/such/out.csv")).unwrap_err();
        assert!(error.to_string().contains("no such directory"), "{error}");
    }
}
