//! The log lines a piece of work writes, for the tests of the spans each binary opens.

use std::sync::{Arc, Mutex, PoisonError};

use inplace_proto::logging::{LogFormat, subscriber};
use tracing_subscriber::EnvFilter;

/// Collects what the subscriber writes.
#[derive(Clone, Default)]
struct Buffer(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Buffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The lines `work` logs in `format` (info and above, no colours), through the binaries'
/// own subscriber.
pub fn capture(format: LogFormat, work: impl FnOnce()) -> String {
    let buf = Buffer::default();
    let writer = buf.clone();
    let sub = subscriber(
        format,
        EnvFilter::new("info"),
        move || writer.clone(),
        false,
    );
    tracing::subscriber::with_default(sub, work);
    let bytes = buf.0.lock().unwrap_or_else(PoisonError::into_inner);
    String::from_utf8_lossy(&bytes).into_owned()
}
