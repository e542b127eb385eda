//! TLS for ureq with OUR rustls `ClientConfig` (from `kube::tls_client`):
//! the one place the client's HTTP stack meets rustls.
//!
//! Why a connector of our own: ureq's `TlsConfig` cannot express a
//! kubeconfig's `tls-server-name`, and would build a second, different
//! rustls configuration from the same material (docs/crates.md#ureq). So the agent's
//! connector chain is ureq's `TcpConnector` (which registers every socket
//! for `Agent::shutdown`, so watches stay cancellable) followed by
//! [`KubeTlsConnector`], written like ureq's own `RustlsConnector` but
//! holding an `Arc<ClientConfig>` and the server name to verify.
//!
//! What it never does: proxies. The chain has no CONNECT/SOCKS step, and the
//! agents are built with `.proxy(None)`, so `HTTPS_PROXY` is not honoured
//! (kubeconfig `proxy-url` is not supported either). `ureq::unversioned` has
//! no semver promise: this file is what to fix on a ureq upgrade.
//!
//! With the `native-tls` cargo feature, [`TlsParts`] holds a native-tls
//! connector instead and [`KubeTlsConnector`] hands the handshake to it
//! (same chain, same rules).

use crate::kube::connection::{Connection, TlsMaterial};
use crate::kube::tls_client::{self, TlsError};
#[cfg(not(feature = "native-tls"))]
use rustls::pki_types::ServerName;
#[cfg(not(feature = "native-tls"))]
use rustls::{ClientConfig, ClientConnection, StreamOwned};
use std::fmt;
use std::io::{Read, Write};
#[cfg(not(feature = "native-tls"))]
use std::sync::Arc;
use ureq::unversioned::transport::{
    Buffers, ConnectionDetails, Connector, Either, LazyBuffers, NextTimeout, TcpConnector,
    Transport, TransportAdapter,
};

/// What an `https://` connection needs; `None` for a plain-HTTP server.
#[cfg(not(feature = "native-tls"))]
#[derive(Clone)]
pub struct TlsParts {
    pub config: Arc<ClientConfig>,
    pub server_name: ServerName<'static>,
}

/// What an `https://` connection needs; `None` for a plain-HTTP server.
#[cfg(feature = "native-tls")]
#[derive(Clone)]
pub struct TlsParts {
    pub connector: native_tls::TlsConnector,
    /// SNI and the name verified (`tls-server-name` or the URL host).
    pub server_name: String,
}

impl TlsParts {
    /// The TLS settings of the build (rustls, or native-tls under the
    /// feature) from `material` (the connection's, plus an exec plugin's
    /// client certificate when it gave one).
    pub fn new(material: &TlsMaterial, conn: &Connection) -> Result<TlsParts, TlsError> {
        #[cfg(not(feature = "native-tls"))]
        return Ok(TlsParts {
            config: tls_client::client_config(material)?,
            server_name: tls_client::server_name(conn)?,
        });
        #[cfg(feature = "native-tls")]
        return Ok(TlsParts {
            connector: tls_client::native_connector(material)?,
            server_name: tls_client::verify_name(conn)?,
        });
    }
}

impl fmt::Debug for TlsParts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsParts")
            .field("server_name", &self.server_name)
            .finish_non_exhaustive()
    }
}

/// The full chain: TCP, then our TLS (rustls, or native-tls with that
/// feature) when the URL is `https`.
pub fn connector(tls: Option<TlsParts>) -> impl Connector {
    ().chain(TcpConnector::default())
        .chain(KubeTlsConnector { tls })
}

/// Wraps the chained TCP transport in TLS for `https` URLs.
#[derive(Debug)]
pub struct KubeTlsConnector {
    tls: Option<TlsParts>,
}

/// The TLS stream of the backend this build has.
#[cfg(not(feature = "native-tls"))]
type SecureTransport = TlsTransport;
#[cfg(feature = "native-tls")]
type SecureTransport = NativeTlsTransport;

impl<In: Transport> Connector<In> for KubeTlsConnector {
    type Out = Either<In, SecureTransport>;

    /// Nothing to do without a transport; a plain one passed on when the
    /// URL needs no TLS (or it is secured already); an error for an https
    /// URL without TLS settings; else the handshake, bounded by the
    /// connection's timeout.
    fn connect(
        &self,
        details: &ConnectionDetails,
        chained: Option<In>,
    ) -> Result<Option<Self::Out>, ureq::Error> {
        let Some(transport) = chained else {
            return Ok(None);
        };
        if !details.needs_tls() || transport.is_tls() {
            return Ok(Some(Either::A(transport)));
        }
        let Some(tls) = self.tls.as_ref() else {
            return Err(ureq::Error::Tls(
                "an https URL on a client built without TLS settings",
            ));
        };
        let mut sock = TransportAdapter::new(transport.boxed(), details.current_time.clone());
        sock.set_timeout(details.timeout);
        let buffers = LazyBuffers::new(
            details.config.input_buffer_size(),
            details.config.output_buffer_size(),
        );
        Ok(Some(Either::B(handshake(tls, sock, buffers)?)))
    }
}

#[cfg(not(feature = "native-tls"))]
fn handshake(
    tls: &TlsParts,
    mut sock: TransportAdapter,
    buffers: LazyBuffers,
) -> Result<TlsTransport, ureq::Error> {
    let mut conn = ClientConnection::new(tls.config.clone(), tls.server_name.clone())?;
    conn.complete_io(&mut sock)?;
    Ok(TlsTransport {
        buffers,
        stream: StreamOwned { conn, sock },
    })
}

#[cfg(not(feature = "native-tls"))]
/// A rustls stream over the chained transport, as ureq's `RustlsTransport`.
pub struct TlsTransport {
    buffers: LazyBuffers,
    stream: StreamOwned<ClientConnection, TransportAdapter>,
}

#[cfg(not(feature = "native-tls"))]
impl fmt::Debug for TlsTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsTransport")
            .field("chained", &self.stream.sock.inner())
            .finish()
    }
}

/// The `Transport` impl shared by the rustls and native-tls transports:
/// both hold `buffers` and a TLS `stream` over the chained TCP transport
/// (`stream.get_mut()`), and differ only in the stream's type.
macro_rules! tls_transport {
    ($t:ty) => {
        impl Transport for $t {
            fn buffers(&mut self) -> &mut dyn Buffers {
                &mut self.buffers
            }

            fn transmit_output(
                &mut self,
                amount: usize,
                timeout: NextTimeout,
            ) -> Result<(), ureq::Error> {
                // Passed on unchanged: the TCP transport below applies the
                // per-read/per-write parts (a TLS write may need to read).
                self.stream.get_mut().set_timeout(timeout);
                let output = &self.buffers.output()[..amount];
                self.stream.write_all(output)?;
                Ok(())
            }

            fn await_input(&mut self, timeout: NextTimeout) -> Result<bool, ureq::Error> {
                self.stream.get_mut().set_timeout(timeout);
                let input = self.buffers.input_append_buf();
                let amount = self.stream.read(input)?;
                self.buffers.input_appended(amount);
                Ok(amount > 0)
            }

            fn is_open(&mut self) -> bool {
                self.stream.get_mut().get_mut().is_open()
            }

            fn is_tls(&self) -> bool {
                true
            }
        }
    };
}

#[cfg(not(feature = "native-tls"))]
tls_transport!(TlsTransport);

#[cfg(feature = "native-tls")]
fn handshake(
    tls: &TlsParts,
    sock: TransportAdapter,
    buffers: LazyBuffers,
) -> Result<NativeTlsTransport, ureq::Error> {
    // The adapter turns a timeout into an error (never WouldBlock), so
    // the handshake either completes or fails here.
    let stream = tls
        .connector
        .connect(&tls.server_name, sock)
        .map_err(|e| match e {
            native_tls::HandshakeError::Failure(e) => {
                ureq::Error::Io(std::io::Error::other(format!("TLS handshake: {e}")))
            }
            native_tls::HandshakeError::WouldBlock(_) => ureq::Error::Io(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "TLS handshake timed out",
            )),
        })?;
    Ok(NativeTlsTransport { buffers, stream })
}

/// A native-tls stream over the chained transport, as ureq's own.
#[cfg(feature = "native-tls")]
pub struct NativeTlsTransport {
    buffers: LazyBuffers,
    stream: native_tls::TlsStream<TransportAdapter>,
}

#[cfg(feature = "native-tls")]
impl fmt::Debug for NativeTlsTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NativeTlsTransport")
            .field("chained", &self.stream.get_ref().inner())
            .finish()
    }
}

#[cfg(feature = "native-tls")]
tls_transport!(NativeTlsTransport);
