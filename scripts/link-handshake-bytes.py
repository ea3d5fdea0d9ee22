#!/usr/bin/env python3
"""Measures the bytes of each flight of Tor's link handshake against a real tor relay.

Starts a tor relay on a loopback ORPort (no network needed: it accepts connections while it
fails to reach the directory), then plays the initiator: a TLS 1.3 handshake, a VERSIONS
cell, and the responder's VERSIONS, CERTS, AUTH_CHALLENGE and NETINFO cells, counting what
crosses the TCP connection in each direction, TLS records included. The figures are what
`crates/tor/src/link.rs` puts on the model's connections.

    python3 scripts/link-handshake-bytes.py [--tor /usr/sbin/tor] [--runs 3]

Prints one line per flight and the cells of the responder's fourth flight with their sizes.
The initiator here is Python's OpenSSL, so flights 1, 3 and 5 are its sizes, not tor's
client's (the ClientHello differs by its cipher list).
"""

import argparse
import os
import shutil
import signal
import socket
import ssl
import struct
import subprocess
import sys
import tempfile
import time

CELL_NAMES = {7: "VERSIONS", 8: "NETINFO", 129: "CERTS", 130: "AUTH_CHALLENGE"}


def start_relay(tor, port, workdir):
    data = os.path.join(workdir, "data")
    os.makedirs(data, mode=0o700)
    torrc = os.path.join(workdir, "torrc")
    with open(torrc, "w") as f:
        f.write(
            f"ORPort 127.0.0.1:{port}\nSocksPort 0\nDataDirectory {data}\n"
            "AssumeReachable 1\nPublishServerDescriptor 0\nExitRelay 0\n"
            "Nickname linkbytes\nContactInfo none\nLog notice file "
            f"{os.path.join(workdir, 'tor.log')}\n"
        )
    proc = subprocess.Popen([tor, "-f", torrc], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc
        except OSError:
            if proc.poll() is not None:
                sys.exit(f"tor exited with {proc.returncode}; see {workdir}/tor.log")
            time.sleep(0.5)
    proc.kill()
    sys.exit(f"tor did not listen on 127.0.0.1:{port} within 60 s")


def one_handshake(port):
    """Returns [(flight, direction, bytes)] and the responder's cells [(name, bytes)]."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = ctx.wrap_bio(incoming, outgoing)
    flights = {}

    def send(flight):
        data = outgoing.read()
        if data:
            sock.sendall(data)
            flights[flight] = flights.get(flight, 0) + len(data)

    def receive(flight):
        data = sock.recv(65536)
        if not data:
            sys.exit("the relay closed the connection")
        flights[flight] = flights.get(flight, 0) + len(data)
        incoming.write(data)

    while True:
        try:
            tls.do_handshake()
            break
        except ssl.SSLWantReadError:
            send("1 ClientHello")
            receive("2 ServerHello..Finished")
    # TLS Finished and VERSIONS (link protocols 3 to 5, two-byte circuit id) go together.
    tls.write(struct.pack(">HBH3H", 0, 7, 6, 3, 4, 5))
    send("3 Finished + VERSIONS")
    buf, cells = b"", []
    while len(cells) < 4:
        try:
            buf += tls.read(65536)
        except ssl.SSLWantReadError:
            receive("4 VERSIONS CERTS AUTH_CHALLENGE NETINFO")
            continue
        while True:
            if not cells:  # VERSIONS: two-byte circuit id
                if len(buf) < 5 or len(buf) < 5 + struct.unpack(">H", buf[3:5])[0]:
                    break
                size = 5 + struct.unpack(">H", buf[3:5])[0]
                cells.append(("VERSIONS", size))
            else:  # four-byte circuit ids from here on
                if len(buf) < 5:
                    break
                command = buf[4]
                if command == 7 or command >= 128:
                    if len(buf) < 7 or len(buf) < 7 + struct.unpack(">H", buf[5:7])[0]:
                        break
                    size = 7 + struct.unpack(">H", buf[5:7])[0]
                else:
                    if len(buf) < 514:
                        break
                    size = 514
                cells.append((CELL_NAMES.get(command, str(command)), size))
            buf = buf[size:]
    # A client's NETINFO: one fixed-size cell.
    tls.write(struct.pack(">IB", 0, 8) + bytes(509))
    send("5 NETINFO (client)")
    sock.close()
    return flights, cells


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tor", default=shutil.which("tor") or "/usr/sbin/tor")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--port", type=int, default=19301)
    args = ap.parse_args()
    workdir = tempfile.mkdtemp(prefix="onionlab-linkbytes-")
    version = subprocess.run([args.tor, "--version"], capture_output=True, text=True)
    print(version.stdout.splitlines()[0], "|", ssl.OPENSSL_VERSION)
    relay = start_relay(args.tor, args.port, workdir)
    try:
        for run in range(args.runs):
            flights, cells = one_handshake(args.port)
            print(f"run {run + 1}:")
            for name in sorted(flights):
                print(f"  {name}: {flights[name]} bytes")
            print("  responder's cells:", ", ".join(f"{n} {b}" for n, b in cells))
    finally:
        relay.send_signal(signal.SIGINT)
        try:
            relay.wait(timeout=10)
        except subprocess.TimeoutExpired:
            relay.kill()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
