//! What the CLI's test binaries share.

use std::io::{BufRead, BufReader};
use std::sync::mpsc;

/// The lines `from` gives (a child's stdout or stderr), as they come, on a channel; the
/// reading thread ends with the stream or when the receiver is dropped.
pub fn line_channel(from: impl std::io::Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for l in BufReader::new(from).lines().map_while(Result::ok) {
            if tx.send(l).is_err() {
                return;
            }
        }
    });
    rx
}
