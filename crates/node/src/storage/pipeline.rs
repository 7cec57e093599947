//! Group commit: the driver hands records to a dedicated sync thread and
//! goes on; the thread writes everything queued, makes it durable with one
//! sync (`fsync` mode) or one flush to the OS (`buffered`), then publishes
//! the durable watermark. The thread owns the engine: fjall holds its
//! journal lock while it syncs, which must never stall the driver.
//!
//! A failed write or sync (a full disk) keeps the records, logs one ERROR,
//! reports the stall, and retries with a reopened engine until it works;
//! the watermark, and with it every acknowledgement, waits meanwhile.

use super::{dir::DirLock, Durability, PersistReport, Storage};
use quorumkv_core::protocol::Record;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// What the sync thread writes to.
pub trait Engine: Send + 'static {
    /// Write `recs`, in order; not necessarily durable yet.
    fn write(&mut self, recs: &[Record]) -> io::Result<()>;
    /// Make everything written durable as `mode` promises.
    fn sync(&mut self, mode: Durability) -> io::Result<()>;
    /// Start over from what is on disk after a failure (fjall refuses
    /// further writes after a failed one). Rewriting records that did
    /// reach the disk is harmless: applying them again changes nothing.
    fn reopen(&mut self) -> io::Result<()>;
    /// Everything on disk, for `Protocol::restore`.
    fn load(&mut self) -> io::Result<Vec<Record>>;
}

/// Counters shared by the sync thread and the driver.
#[derive(Default)]
struct Shared {
    durable: AtomicU64,
    notify: Arc<Notify>,
    records: AtomicU64,
    syncs: AtomicU64,
    sync_us_sum: AtomicU64,
    sync_us_max: AtomicU64,
    errors: AtomicU64,
    stalled: Mutex<String>,
    closing: AtomicBool,
}

/// The driver's end of the pipeline.
pub struct Pipeline {
    tx: Option<mpsc::Sender<(u64, Record)>>,
    appended: u64,
    shared: Arc<Shared>,
    mode: Durability,
    loaded: Option<Vec<Record>>,
    thread: Option<JoinHandle<()>>,
    /// Released after the thread has closed the engine.
    lock: Option<DirLock>,
}

/// At most this many records go into one sync while more keep coming.
const MAX_BATCH: usize = 16_384;
const MAX_BACKOFF: Duration = Duration::from_secs(1);

impl Pipeline {
    /// Load what `engine` holds, then start its sync thread.
    pub fn start<E: Engine>(
        mut engine: E,
        mode: Durability,
        lock: Option<DirLock>,
    ) -> io::Result<Pipeline> {
        let loaded = engine.load()?;
        let shared = Arc::new(Shared::default());
        let (tx, rx) = mpsc::channel();
        let sh = shared.clone();
        let thread = std::thread::Builder::new()
            .name("quorumkv-sync".into())
            .spawn(move || sync_loop(engine, mode, rx, &sh))?;
        Ok(Pipeline {
            tx: Some(tx),
            appended: 0,
            shared,
            mode,
            loaded: Some(loaded),
            thread: Some(thread),
            lock,
        })
    }
}

impl Storage for Pipeline {
    fn append(&mut self, rec: Record) -> u64 {
        self.appended += 1;
        if let Some(tx) = &self.tx {
            // A send fails only when the thread is gone (it panicked): the
            // watermark then never passes this record, so nothing that
            // depends on it is ever acknowledged.
            let _ = tx.send((self.appended, rec));
        }
        self.appended
    }
    fn durable(&self) -> u64 {
        self.shared.durable.load(Relaxed)
    }
    fn waker(&self) -> Option<Arc<Notify>> {
        Some(self.shared.notify.clone())
    }
    fn load(&mut self) -> io::Result<Vec<Record>> {
        Ok(self.loaded.take().unwrap_or_default())
    }
    fn mode(&self) -> Durability {
        self.mode
    }
    fn report(&self) -> PersistReport {
        let s = &self.shared;
        PersistReport {
            records: s.records.load(Relaxed),
            syncs: s.syncs.load(Relaxed),
            sync_us_sum: s.sync_us_sum.load(Relaxed),
            sync_us_max: s.sync_us_max.load(Relaxed),
            pending: self.appended - self.durable(),
            errors: s.errors.load(Relaxed),
            stalled: s.stalled.lock().map(|s| s.clone()).unwrap_or_default(),
        }
    }
}

impl Drop for Pipeline {
    /// A clean stop: the thread syncs what is queued (unless it is stalled)
    /// and closes the engine before the directory is unlocked.
    fn drop(&mut self) {
        self.shared.closing.store(true, Relaxed);
        drop(self.tx.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        drop(self.lock.take());
    }
}

fn sync_loop<E: Engine>(
    mut engine: E,
    mode: Durability,
    rx: mpsc::Receiver<(u64, Record)>,
    sh: &Shared,
) {
    let mut batch = Vec::new();
    let mut last = 0;
    let mut backoff = Duration::from_millis(10);
    let mut stalled = false;
    loop {
        if batch.is_empty() {
            let Ok((seq, rec)) = rx.recv() else { return };
            batch.push(rec);
            last = seq;
        }
        while batch.len() < MAX_BATCH {
            let Ok((seq, rec)) = rx.try_recv() else { break };
            batch.push(rec);
            last = seq;
        }
        let t = Instant::now();
        match engine.write(&batch).and_then(|()| engine.sync(mode)) {
            Ok(()) => {
                let us = t.elapsed().as_micros() as u64;
                sh.records.fetch_add(batch.len() as u64, Relaxed);
                sh.syncs.fetch_add(1, Relaxed);
                sh.sync_us_sum.fetch_add(us, Relaxed);
                sh.sync_us_max.fetch_max(us, Relaxed);
                sh.durable.store(last, Relaxed);
                sh.notify.notify_one();
                batch.clear();
                if std::mem::take(&mut stalled) {
                    tracing::warn!("persisting works again; acknowledgements resume");
                    set_stalled(sh, String::new());
                    backoff = Duration::from_millis(10);
                }
            }
            Err(e) => {
                sh.errors.fetch_add(1, Relaxed);
                if !std::mem::replace(&mut stalled, true) {
                    tracing::error!(
                        "cannot persist ({e}); acknowledgements are withheld until it works again (retrying)"
                    );
                }
                set_stalled(sh, e.to_string());
                if sh.closing.load(Relaxed) {
                    tracing::error!("stopping with {} records not persisted", batch.len());
                    return;
                }
                std::thread::sleep(backoff);
                backoff = (backoff * 2).min(MAX_BACKOFF);
                if let Err(e) = engine.reopen() {
                    set_stalled(sh, format!("reopen failed: {e}"));
                }
            }
        }
    }
}

fn set_stalled(sh: &Shared, why: String) {
    if let Ok(mut s) = sh.stalled.lock() {
        *s = why.replace(['\r', '\n'], " ");
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use bytes::Bytes;
    use quorumkv_core::Tag;
    use std::sync::atomic::AtomicUsize;

    pub fn rec(ts: u64) -> Record {
        Record::Register {
            key: Bytes::from_static(b"k"),
            tag: Tag { ts, writer: 1 },
            value: None,
        }
    }

    /// An engine in memory whose syncs take `delay` and fail while `full`.
    #[derive(Clone, Default)]
    pub struct FakeEngine {
        pub written: Arc<Mutex<Vec<Record>>>,
        pub synced: Arc<Mutex<Vec<Record>>>,
        pub syncs: Arc<AtomicUsize>,
        pub full: Arc<AtomicBool>,
        pub delay: Duration,
    }

    impl Engine for FakeEngine {
        fn write(&mut self, recs: &[Record]) -> io::Result<()> {
            if self.full.load(Relaxed) {
                return Err(io::Error::other("No space left on device"));
            }
            self.written.lock().unwrap().extend_from_slice(recs);
            Ok(())
        }
        fn sync(&mut self, _: Durability) -> io::Result<()> {
            std::thread::sleep(self.delay);
            let w = std::mem::take(&mut *self.written.lock().unwrap());
            self.synced.lock().unwrap().extend(w);
            self.syncs.fetch_add(1, Relaxed);
            Ok(())
        }
        fn reopen(&mut self) -> io::Result<()> {
            self.written.lock().unwrap().clear();
            Ok(())
        }
        fn load(&mut self) -> io::Result<Vec<Record>> {
            Ok(self.synced.lock().unwrap().clone())
        }
    }

    fn wait_until(mut f: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !f() {
            assert!(Instant::now() < deadline, "timed out");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn one_sync_covers_every_record_queued_meanwhile() {
        let engine = FakeEngine {
            delay: Duration::from_millis(20),
            ..FakeEngine::default()
        };
        let mut p = Pipeline::start(engine.clone(), Durability::Fsync, None).unwrap();
        for ts in 1..=200 {
            p.append(rec(ts));
        }
        wait_until(|| p.durable() == 200);
        let r = p.report();
        assert_eq!((r.records, r.pending), (200, 0));
        assert!(r.syncs < 20, "{} syncs for 200 records", r.syncs);
        assert_eq!(engine.synced.lock().unwrap().len(), 200);
        assert_eq!(engine.synced.lock().unwrap()[199], rec(200), "in order");
    }

    #[test]
    fn a_full_disk_stalls_the_watermark_until_space_returns() {
        let engine = FakeEngine::default();
        let mut p = Pipeline::start(engine.clone(), Durability::Fsync, None).unwrap();
        p.append(rec(1));
        wait_until(|| p.durable() == 1);
        engine.full.store(true, Relaxed);
        p.append(rec(2));
        p.append(rec(3));
        wait_until(|| !p.report().stalled.is_empty());
        assert_eq!(p.durable(), 1);
        assert_eq!(p.report().pending, 2);
        assert!(p.report().stalled.contains("No space"));
        engine.full.store(false, Relaxed);
        wait_until(|| p.durable() == 3);
        assert_eq!(p.report().stalled, "");
        assert_eq!(*engine.synced.lock().unwrap(), vec![rec(1), rec(2), rec(3)]);
    }

    #[test]
    fn a_clean_stop_syncs_what_is_queued() {
        let engine = FakeEngine {
            delay: Duration::from_millis(5),
            ..FakeEngine::default()
        };
        let mut p = Pipeline::start(engine.clone(), Durability::Buffered, None).unwrap();
        for ts in 1..=50 {
            p.append(rec(ts));
        }
        drop(p);
        assert_eq!(engine.synced.lock().unwrap().len(), 50);
    }
}
