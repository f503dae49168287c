//! The connection loop: HTTP/1.1 connections served with hyper, each given
//! [`HttpLimits::header_read_timeout`](super::HttpLimits) to send a request's headers (a
//! client that opens a connection and sends nothing, or a line now and then, is
//! disconnected instead of holding it until shutdown; `axum::serve` sets no timer, so
//! hyper's header timeout never fires there). At shutdown, connections without a request
//! under way close at once and requests in flight finish.

use std::future::Future;
use std::pin::pin;
use std::time::Duration;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use axum::body::Body;
use axum::extract::Request;
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tower::ServiceExt;

/// How long a connection without a request under way may take to close at shutdown.
const UNUSED_CONNECTION_GRACE: Duration = Duration::from_millis(100);

/// Accepts on `listener` until `shutdown` resolves, then waits for the open connections to
/// finish their requests.
pub async fn serve(
    listener: tokio::net::TcpListener,
    app: Router,
    header_read_timeout: Duration,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let (closing_tx, closing_rx) = tokio::sync::watch::channel(false);
    let mut shutdown = pin!(shutdown);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(_) => {
                    // Out of descriptors, or a connection reset before it was accepted:
                    // the listener stays; a short pause lets descriptors free up.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        // Requests under way on this connection: at shutdown, a connection without one
        // (opened and never used, which hyper would keep until its header timeout) is
        // closed at once, the others when their response is out.
        let active = Arc::new(AtomicUsize::new(0));
        let service = {
            let (app, active) = (app.clone(), active.clone());
            hyper::service::service_fn(move |req: Request<Incoming>| {
                let (app, active) = (app.clone(), active.clone());
                active.fetch_add(1, Ordering::SeqCst);
                async move {
                    let response = app.oneshot(req.map(Body::new)).await;
                    active.fetch_sub(1, Ordering::SeqCst);
                    response
                }
            })
        };
        let mut closing = closing_rx.clone();
        tokio::spawn(async move {
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(header_read_timeout);
            let mut conn = pin!(builder.serve_connection(TokioIo::new(stream), service));
            tokio::select! {
                _ = conn.as_mut() => {}
                _ = closing.changed() => {
                    conn.as_mut().graceful_shutdown();
                    if active.load(Ordering::SeqCst) == 0 {
                        let _ = tokio::time::timeout(UNUSED_CONNECTION_GRACE, conn).await;
                    } else {
                        let _ = conn.await;
                    }
                }
            }
        });
    }
    drop(closing_rx);
    let _ = closing_tx.send(true);
    closing_tx.closed().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::routing::get;
    use std::io::{Read, Write};
    use std::time::Instant;

    /// A server with `timeout` for headers on a runtime of its own; its address and the
    /// sender that shuts it down.
    fn server(
        rt: &tokio::runtime::Runtime,
        timeout: Duration,
    ) -> (
        std::net::SocketAddr,
        tokio::sync::oneshot::Sender<()>,
        tokio::task::JoinHandle<std::io::Result<()>>,
    ) {
        let listener = rt
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let addr = listener.local_addr().unwrap();
        let app = Router::new().route("/", get(|| async { "ok" }));
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let served = rt.spawn(serve(listener, app, timeout, async move {
            let _ = stop_rx.await;
        }));
        (addr, stop_tx, served)
    }

    /// Shuts the server down and checks it stopped within `limit`.
    fn stops_within(
        rt: &tokio::runtime::Runtime,
        stop: tokio::sync::oneshot::Sender<()>,
        served: tokio::task::JoinHandle<std::io::Result<()>>,
        limit: Duration,
    ) {
        let _ = stop.send(());
        let stopped = Instant::now();
        rt.block_on(served).unwrap().unwrap();
        assert!(stopped.elapsed() < limit, "{:?}", stopped.elapsed());
    }

    #[test]
    fn a_connection_that_does_not_finish_its_headers_is_closed() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let (addr, stop, served) = server(&rt, Duration::from_millis(300));
        let mut slow = std::net::TcpStream::connect(addr).unwrap();
        slow.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        slow.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n").unwrap();
        let started = Instant::now();
        let mut answer = Vec::new();
        // Closed by the server (whatever it answers first), well before the read timeout.
        let _ = slow.read_to_end(&mut answer);
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
        assert!(!String::from_utf8_lossy(&answer).contains("200 OK"));

        // A request sent whole is served; its keep-alive connection, idle, does not hold
        // up the shutdown.
        let mut fine = std::net::TcpStream::connect(addr).unwrap();
        fine.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let mut buf = [0u8; 256];
        let n = fine.read(&mut buf).unwrap();
        assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200 OK"));
        stops_within(&rt, stop, served, Duration::from_secs(2));

        // A connection opened and never used does not hold up the shutdown until its
        // header timeout either.
        let (addr, stop, served) = server(&rt, Duration::from_secs(30));
        let _unused = std::net::TcpStream::connect(addr).unwrap();
        std::thread::sleep(Duration::from_millis(100));
        stops_within(&rt, stop, served, Duration::from_secs(2));
    }
}
