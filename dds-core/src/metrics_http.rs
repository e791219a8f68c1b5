//! The participant's side of [`crate::metrics`]: its counters read together, and the
//! Prometheus endpoint's thread (`[metrics] listen`): one connection at a time, bounded
//! requests, time-outs, a 4xx status for anything but `GET /metrics`, never a panic.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Weak;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::inner::ParticipantInner;
use crate::metrics::{
    respond, MetricsConfig, ParticipantCounters, METRICS_IO_TIMEOUT_MS, METRICS_REQUEST_BYTES_MAX,
};

/// How often the idle endpoint looks whether its participant is gone, in ms.
const METRICS_POLL_MS: u64 = 100;

pub(crate) fn counters_of(inner: &ParticipantInner) -> ParticipantCounters {
    let mut c = ParticipantCounters {
        node: inner.me(),
        group: inner.driver.group_counters(),
        ..ParticipantCounters::default()
    };
    let st = crate::common::lock(&inner.shared.state);
    c.view_id = st.view.as_ref().map_or(0, |v| v.vid);
    inner
        .shared
        .counters
        .fill(&mut c, st.writers.values().map(|w| &*w.written));
    c
}

/// Binds the endpoint of `cfg` (`None` when off); the error names the key.
pub(crate) fn bind(cfg: &MetricsConfig) -> Result<Option<TcpListener>> {
    let Some(listen) = &cfg.listen else {
        return Ok(None);
    };
    let l = TcpListener::bind(listen.as_str()).map_err(|e| {
        Error::Config(format!(
            "[metrics] listen = {listen:?}: cannot listen there: {e}"
        ))
    })?;
    l.set_nonblocking(true)
        .map_err(|e| Error::Config(format!("[metrics] listen = {listen:?}: {e}")))?;
    Ok(Some(l))
}

/// Serves `listener` on a thread of its own until the participant is gone or stopped.
pub(crate) fn serve(listener: TcpListener, inner: Weak<ParticipantInner>, node: u32) {
    let spawned = std::thread::Builder::new()
        .name(format!("spindle-metrics-{node}"))
        .spawn(move || loop {
            match listener.accept() {
                Ok((stream, _)) => {
                    let Some(p) = inner.upgrade() else { break };
                    let counters = counters_of(&p);
                    drop(p);
                    if let Err(e) = answer(stream, &counters) {
                        tracing::debug!(error = %e, "metrics endpoint: a request failed");
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    // Serves as long as the participant exists (a stopped one that
                    // rejoins keeps its endpoint).
                    if inner.strong_count() == 0 {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(METRICS_POLL_MS));
                }
                Err(e) => {
                    tracing::debug!(error = %e, "metrics endpoint: accept failed");
                    std::thread::sleep(Duration::from_millis(METRICS_POLL_MS));
                }
            }
        });
    if let Err(e) = spawned {
        tracing::error!(error = %e, "the metrics endpoint's thread did not start");
    }
}

/// Reads one request from `stream` and answers it.
fn answer(mut stream: TcpStream, counters: &ParticipantCounters) -> std::io::Result<()> {
    let timeout = Some(Duration::from_millis(METRICS_IO_TIMEOUT_MS));
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(timeout)?;
    stream.set_write_timeout(timeout)?;
    let mut req = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    let complete = loop {
        if req.windows(4).any(|w| w == b"\r\n\r\n") || req.windows(2).any(|w| w == b"\n\n") {
            break true;
        }
        if req.len() >= METRICS_REQUEST_BYTES_MAX {
            break false;
        }
        let n = stream.read(&mut buf)?;
        if n == 0 {
            break !req.is_empty();
        }
        req.extend_from_slice(&buf[..n]);
    };
    let (status, body) = respond(&req, complete, counters);
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes())?;
    stream.write_all(body.as_bytes())?;
    stream.flush()
}
