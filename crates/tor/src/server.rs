//! A file server: answers each request with the number of bytes asked for, then closes.

use onionlab_engine::Context;
use onionlab_net::{NetEvent, NetStack, SocketEvent, SocketId};

use crate::host::Ev;
use crate::wire::Wire;
use crate::world::HTTP_PORT;

pub struct Server {
    pub stack: NetStack<Wire>,
    /// Responses still being written: socket and bytes left.
    sending: Vec<(SocketId, u64)>,
    pub requests: u64,
    pub bytes_served: u64,
}

impl Server {
    pub fn new(stack: NetStack<Wire>) -> Self {
        Server {
            stack,
            sending: Vec::new(),
            requests: 0,
            bytes_served: 0,
        }
    }

    pub fn start(&mut self) {
        self.stack
            .listen(HTTP_PORT)
            .expect("a fresh server has its port free");
    }

    pub fn on_net(&mut self, ctx: &mut Context<'_, Ev>, event: NetEvent<Wire>) {
        self.stack.handle(ctx, event);
        while let Some(event) = self.stack.poll_event() {
            match event {
                SocketEvent::Message {
                    socket,
                    message: Wire::Request { bytes },
                } => {
                    self.requests += 1;
                    self.sending.push((socket, bytes as u64));
                    self.send(ctx, socket);
                }
                SocketEvent::Writable(socket) => self.send(ctx, socket),
                SocketEvent::PeerClosed(socket) => {
                    // The exit gave up on the download: stop sending.
                    if let Some(i) = self.sending.iter().position(|&(s, _)| s == socket) {
                        self.sending.swap_remove(i);
                    }
                    self.stack.close(ctx, socket);
                }
                SocketEvent::Reset(socket) | SocketEvent::TimedOut(socket) => {
                    if let Some(i) = self.sending.iter().position(|&(s, _)| s == socket) {
                        self.sending.swap_remove(i);
                    }
                }
                _ => {}
            }
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
