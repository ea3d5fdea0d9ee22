//! A file server: answers each request with the number of bytes asked for, then closes; and
//! takes uploads, answering each with a short response once all its bytes have arrived.

use onionlab_engine::Context;
use onionlab_net::{NetEvent, NetStack, SocketEvent, SocketId};

use crate::event::Ev;
use crate::wire::{Wire, REQUEST_BYTES, UPLOAD_RESPONSE_BYTES};
use crate::world::HTTP_PORT;

/// An upload being received.
struct Upload {
    socket: SocketId,
    /// Bytes read on the connection, its header included.
    read: u64,
    /// Bytes the upload's header and body take.
    expected: u64,
}

/// How many uploads' sizes a server keeps (`Server::uploads_received`; bounded memory).
pub const MAX_UPLOADS_KEPT: usize = 1024;

/// A file server host (see the module documentation). It handles its network stack's
/// events itself, without the driver and sans-IO machine that Tor hosts have.
pub struct Server {
    /// The server's network stack, which holds its connections from exits.
    pub stack: NetStack<Wire>,
    /// Responses still being written: socket and bytes left.
    sending: Vec<(SocketId, u64)>,
    /// Bytes read on connections whose request has not arrived whole yet: a read reports its
    /// bytes before the messages they complete, and an upload's first read may hold body
    /// bytes after its header.
    unclaimed: Vec<(SocketId, u64)>,
    uploads: Vec<Upload>,
    /// Requests answered so far: downloads' requests, and uploads once all their bytes
    /// arrived.
    pub requests: u64,
    /// Response bytes written to connections so far, upload responses included.
    pub bytes_served: u64,
    /// Body bytes read of each upload answered, in order (the model's check that the exit
    /// delivered exactly what the client sent), the first [`MAX_UPLOADS_KEPT`] of them: a
    /// server of a long run answers uploads without end, and the check needs only a few.
    pub uploads_received: Vec<u64>,
}

impl Server {
    /// A server on `stack`, not yet listening (see [`Server::start`]).
    pub fn new(stack: NetStack<Wire>) -> Self {
        Server {
            stack,
            sending: Vec::new(),
            unclaimed: Vec::new(),
            uploads: Vec::new(),
            requests: 0,
            bytes_served: 0,
            uploads_received: Vec::new(),
        }
    }

    /// The host's start: listens on [`HTTP_PORT`].
    pub fn start(&mut self) {
        self.stack
            .listen(HTTP_PORT)
            .expect("a fresh server has its port free");
    }

    /// A packet or timer of the network stack: the stack handles it, then the server answers
    /// the requests and uploads that completed and writes more of its responses as the
    /// sockets take them.
    pub fn on_net(&mut self, ctx: &mut Context<'_, Ev>, event: NetEvent<Wire>) {
        self.stack.handle(ctx, event);
        while let Some(event) = self.stack.poll_event() {
            match event {
                // Runs of equal messages are rare here (pipelined requests of one size), and
                // each is its own request.
                SocketEvent::Message {
                    socket,
                    message: Wire::Request { bytes },
                    count,
                } => {
                    for _ in 0..count {
                        self.take_unclaimed(socket);
                        self.requests += 1;
                        self.sending.push((socket, bytes as u64));
                        self.send(ctx, socket);
                    }
                }
                SocketEvent::Message {
                    socket,
                    message: Wire::Upload { bytes },
                    count,
                } => {
                    for _ in 0..count {
                        let read = self.take_unclaimed(socket);
                        self.uploads.push(Upload {
                            socket,
                            read,
                            expected: REQUEST_BYTES + u64::from(bytes),
                        });
                        self.upload_read(ctx, socket, 0);
                    }
                }
                SocketEvent::Data { socket, bytes } => self.upload_read(ctx, socket, bytes),
                SocketEvent::Writable(socket) => self.send(ctx, socket),
                SocketEvent::PeerClosed(socket) => {
                    // The exit gave up on the transfer: stop sending.
                    self.forget(socket);
                    self.stack.close(ctx, socket);
                }
                SocketEvent::Closed(socket)
                | SocketEvent::Reset(socket)
                | SocketEvent::TimedOut(socket) => self.forget(socket),
                _ => {}
            }
        }
    }

    fn forget(&mut self, socket: SocketId) {
        if let Some(i) = self.sending.iter().position(|&(s, _)| s == socket) {
            self.sending.swap_remove(i);
        }
        self.uploads.retain(|u| u.socket != socket);
        self.take_unclaimed(socket);
    }

    /// The bytes read on `socket` before its request arrived whole.
    fn take_unclaimed(&mut self, socket: SocketId) -> u64 {
        match self.unclaimed.iter().position(|&(s, _)| s == socket) {
            Some(i) => self.unclaimed.swap_remove(i).1,
            None => 0,
        }
    }

    /// `bytes` more were read on `socket`: an upload's, which is answered once complete, or
    /// a request's still arriving.
    fn upload_read(&mut self, ctx: &mut Context<'_, Ev>, socket: SocketId, bytes: u64) {
        let Some(i) = self.uploads.iter().position(|u| u.socket == socket) else {
            match self.unclaimed.iter_mut().find(|(s, _)| *s == socket) {
                Some((_, n)) => *n += bytes,
                None => self.unclaimed.push((socket, bytes)),
            }
            return;
        };
        let u = &mut self.uploads[i];
        u.read += bytes;
        if u.read >= u.expected {
            let body = u.read - REQUEST_BYTES;
            self.uploads.swap_remove(i);
            if self.uploads_received.len() < MAX_UPLOADS_KEPT {
                self.uploads_received.push(body);
            }
            self.requests += 1;
            self.sending.push((socket, UPLOAD_RESPONSE_BYTES));
            self.send(ctx, socket);
        }
    }

    fn send(&mut self, ctx: &mut Context<'_, Ev>, socket: SocketId) {
        let Some(i) = self.sending.iter().position(|&(s, _)| s == socket) else {
            return;
        };
        let left = self.sending[i].1;
        let n = self.stack.write(socket, left);
        self.bytes_served += n;
        self.stack.flush(ctx, socket);
        if n == left {
            self.sending.swap_remove(i);
            self.stack.close(ctx, socket);
        } else {
            self.sending[i].1 -= n;
        }
    }
}
