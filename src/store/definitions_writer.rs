//! Owns: appending durable directory changes (and run-time user and permission
//! changes, `access`) to `definitions.log` at run time, on the
//! coordinator's shard — records gathered while a write is under way go out together
//! (group commit), and every change's caller is woken once its record is synced, so
//! declare-ok, bind-ok and delete-ok follow the disk.
//!
//! Does not: decide what is durable (`definitions::is_durable`) or replay the log.

use std::path::{Path, PathBuf};
use std::rc::Rc;

use bytes::BytesMut;
use tokio::sync::oneshot;

use crate::model::routing::DirectoryChange;

use super::definitions;

/// The coordinator's definitions log.
pub struct DefinitionsWriter {
    path: PathBuf,
    file: Option<Rc<tokio_uring::fs::File>>,
    /// Bytes in the file (written or being written).
    size: u64,
    pending: BytesMut,
    waiters: Vec<oneshot::Sender<()>>,
    in_flight: bool,
    fsync: bool,
}

/// A group taken for writing.
pub struct DefinitionsGroup {
    pub file: Rc<tokio_uring::fs::File>,
    pub data: bytes::Bytes,
    pub offset: u64,
    pub waiters: Vec<oneshot::Sender<()>>,
    pub fsync: bool,
}

impl DefinitionsWriter {
    /// A writer appending to the log in `data_dir`, which is `size` bytes long.
    pub fn new(data_dir: &Path, size: u64, fsync: bool) -> DefinitionsWriter {
        DefinitionsWriter {
            path: data_dir.join(definitions::FILE),
            file: None,
            size,
            pending: BytesMut::new(),
            waiters: Vec::new(),
            in_flight: false,
            fsync,
        }
    }

    /// Bytes of the log.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Adds a change's record to the next group.
    pub fn append(&mut self, vhost: &str, change: &DirectoryChange) {
        definitions::encode_change(&mut self.pending, vhost, change);
    }

    /// Adds the record of a user or permission change to the next group.
    pub fn append_access(&mut self, change: &super::access::AccessChange) {
        super::access::encode(&mut self.pending, change);
    }

    /// Adds the record of a policy change to the next group.
    pub fn append_policy(&mut self, change: &super::policies::PolicyChange) {
        super::policies::encode(&mut self.pending, change);
    }

    /// Whether records wait.
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// A receiver told when what is pending now is on disk.
    pub fn waiter(&mut self) -> oneshot::Receiver<()> {
        let (tx, rx) = oneshot::channel();
        self.waiters.push(tx);
        rx
    }

    /// Takes the pending records as a group, unless one is being written.
    pub fn take_group(&mut self) -> std::io::Result<Option<DefinitionsGroup>> {
        if self.in_flight || self.pending.is_empty() {
            return Ok(None);
        }
        let file = match &self.file {
            Some(f) => Rc::clone(f),
            None => {
                let std_file = std::fs::OpenOptions::new()
                    .create(true)
                    .write(true)
                    .truncate(false)
                    .open(&self.path)?;
                let f = Rc::new(tokio_uring::fs::File::from_std(std_file));
                self.file = Some(Rc::clone(&f));
                f
            }
        };
        let data = self.pending.split().freeze();
        let offset = self.size;
        self.size += data.len() as u64;
        self.in_flight = true;
        Ok(Some(DefinitionsGroup {
            file,
            data,
            offset,
            waiters: std::mem::take(&mut self.waiters),
            fsync: self.fsync,
        }))
    }

    /// The group is written.
    pub fn done(&mut self) {
        self.in_flight = false;
    }
}

/// Writes a group and syncs it. An error here means a definition the client will be
/// told about may not be on disk: the caller stops the broker.
pub async fn write_group(group: &DefinitionsGroup) -> std::io::Result<()> {
    let (res, _) = group
        .file
        .write_all_at(group.data.clone(), group.offset)
        .await;
    res?;
    if group.fsync {
        group.file.sync_data().await?;
    }
    Ok(())
}
