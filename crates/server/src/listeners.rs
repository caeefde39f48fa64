//! The server's listeners other than the data plane, each bounded like it
//! ([`ratelab_gateway::conns`]):
//!
//! - the **admin listener** (`--admin-listen`): the metrics and the switches
//!   ([`ratelab_gateway::admin`]), over the same HTTP/1.1 loop as the data plane, with a small
//!   bound of its own on open connections;
//! - the **gRPC listener** (`--grpc-listen`): its accepted sockets admitted and watched as
//!   multiplexed connections, for tonic, whose own settings bound the rest (each call's
//!   time, streams per connection, keepalive pings that find a dead peer).

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use ratelab_gateway::conns::{ConnLimits, Connections, Framing, Watched};
use ratelab_gateway::front::{Writes, is_connection_error, serve};
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};

/// Serves `router` (the admin plane) on `listener` until `stop`, each request carrying its
/// connection's peer as `ConnectInfo<SocketAddr>`.
pub async fn serve_admin(
    listener: TcpListener,
    router: Router,
    limits: ConnLimits,
    stop: impl Future<Output = ()>,
) {
    let conns = Connections::new("admin", limits);
    let service_for = |peer: SocketAddr, _| {
        let router = router.clone();
        hyper::service::service_fn(move |mut req: http::Request<Incoming>| {
            req.extensions_mut().insert(ConnectInfo(peer));
            let mut router = router.clone();
            async move { tower::Service::call(&mut router, req.map(Body::new)).await }
        })
    };
    serve(listener, Writes::Flat, conns, service_for, stop).await;
}

/// A gRPC connection: an admitted socket, watched as multiplexed.
#[derive(Debug)]
pub struct GrpcConn(Watched<TcpStream>);

impl tonic::transport::server::Connected for GrpcConn {
    type ConnectInfo = tonic::transport::server::TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.0.get_ref().connect_info()
    }
}

impl AsyncRead for GrpcConn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for GrpcConn {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.0).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

/// The gRPC listener's accepted connections, admitted under `limits`, for tonic's
/// `serve_with_incoming_shutdown`. The accepting task ends when the stream is dropped.
pub fn grpc_incoming(
    listener: TcpListener,
    limits: ConnLimits,
) -> tokio_stream::wrappers::ReceiverStream<std::io::Result<GrpcConn>> {
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    let conns = Connections::new("grpc", limits);
    tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                a = listener.accept() => a,
                () = tx.closed() => return,
            };
            let stream = match accepted {
                Ok((s, _)) => s,
                Err(e) if is_connection_error(&e) => continue,
                Err(e) => {
                    eprintln!("accept error (gRPC): {e}; accepting again in 1 s");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
            };
            let _ = stream.set_nodelay(true);
            let Some(conn) = conns.admit(stream, Framing::Multiplexed) else {
                continue;
            };
            if tx.send(Ok(GrpcConn(conn))).await.is_err() {
                return;
            }
        }
    });
    tokio_stream::wrappers::ReceiverStream::new(rx)
}
