#!/usr/bin/env python3
"""Traffic across a link between two network namespaces, for the test of the delay line
(tests/netns/delay_line.sh, NOTE [Delay line]).

  line_traffic.py udp FROM_NETNS TO_NETNS TO_ADDRESS COUNT SIZE RATE
      COUNT numbered datagrams of SIZE bytes (at least 16), RATE a second (0: as fast as they go),
      sent from FROM's namespace to TO_ADDRESS in TO's. Each carries its number and the time it
      was sent (CLOCK_MONOTONIC, one clock for every namespace of the machine), so the receiver
      knows each one's delay one way. Prints one line:
        received N prefix K min_ms A median_ms B max_ms C send_s S rcvbuf_errors E
      N datagrams came; the first K of them were numbers 0 .. K-1 in that order (K = N = COUNT:
      none lost, none repeated, none reordered); their one-way delays; the time the sender took;
      the datagrams the receiving socket itself dropped (its buffer full), which a loss would be
      no fault of the link's. The receiver stops at COUNT datagrams, or 1 s after the last one
      came (10 s when none came).
  line_traffic.py tcp FROM_NETNS TO_NETNS TO_ADDRESS BYTES
      BYTES pseudo-random bytes over one TCP connection from FROM to TO. Prints one line:
        bytes N intact 1|0 seconds S
  line_traffic.py --send-udp ADDRESS COUNT SIZE RATE
      the sender alone, in this process's namespace (prints the seconds it took).
"""
import hashlib
import random
import socket
import statistics
import struct
import subprocess
import sys
import time

PORT = 5743
SO_RCVBUFFORCE = 33  # Linux's; the socket module does not name it
FIRST_WAIT_S = 10
IDLE_S = 1


def udp_errors():
    """The UDP datagrams this namespace dropped for a full socket buffer so far."""
    with open("/proc/net/snmp") as f:
        rows = [line.split() for line in f if line.startswith("Udp:")]
    return int(rows[1][rows[0].index("RcvbufErrors")])


def receive_udp(address, count):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 64 << 20)
    except OSError:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 20)
    s.bind((address, PORT))
    errors = udp_errors()
    print("ready", flush=True)
    numbers, delays = [], []
    s.settimeout(FIRST_WAIT_S)
    while len(numbers) < count:
        try:
            data = s.recv(65536)
        except socket.timeout:
            break
        arrived = time.monotonic_ns()
        number, sent = struct.unpack_from("<QQ", data)
        numbers.append(number)
        delays.append((arrived - sent) / 1e6)
        s.settimeout(IDLE_S)
    prefix = 0
    while prefix < len(numbers) and numbers[prefix] == prefix:
        prefix += 1
    lo, mid, hi = (min(delays), statistics.median(delays), max(delays)) if delays else (-1, -1, -1)
    sys.stdout.write(f"received {len(numbers)} prefix {prefix} min_ms {lo:.3f} median_ms {mid:.3f} "
                     f"max_ms {hi:.3f} rcvbuf_errors {udp_errors() - errors}\n")


def send_udp(address, count, size, rate):
    if size < 16:
        sys.exit("line_traffic.py: a datagram needs at least 16 bytes")
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.connect((address, PORT))
    padding = bytes(size - 16)
    start = time.monotonic()
    for i in range(count):
        if rate > 0:
            ahead = start + i / rate - time.monotonic()
            if ahead > 0.001:  # in steps of a millisecond or more: sleep's own cost is some 0.05 ms
                time.sleep(ahead)
        try:
            s.send(struct.pack("<QQ", i, time.monotonic_ns()) + padding)
        except OSError as e:
            sys.exit(f"line_traffic.py: datagram {i} was not sent: {e}")
    print(f"{time.monotonic() - start:.3f}", flush=True)


def receive_tcp(address):
    with socket.create_server((address, PORT)) as server:
        print("ready", flush=True)
        conn, _ = server.accept()
        with conn:
            digest, n = hashlib.sha256(), 0
            while chunk := conn.recv(1 << 20):
                digest.update(chunk)
                n += len(chunk)
    print(n, digest.hexdigest(), flush=True)


def send_tcp(address, nbytes):
    data = random.Random(7).randbytes(nbytes)
    start = time.monotonic()
    with socket.create_connection((address, PORT), timeout=30) as conn:
        conn.sendall(data)
    print(nbytes, hashlib.sha256(data).hexdigest(), f"{time.monotonic() - start:.3f}", flush=True)


def in_netns(netns, *args):
    return ["ip", "netns", "exec", netns, sys.executable, __file__] + [str(a) for a in args]


def across(source, target, receiver, sender):
    """Starts `receiver` in `target`, then runs `sender` in `source`: both outputs' last lines."""
    server = subprocess.Popen(in_netns(target, *receiver), stdout=subprocess.PIPE, text=True)
    try:
        if server.stdout.readline().strip() != "ready":
            sys.exit("line_traffic.py: the receiver did not start in " + target)
        sent = subprocess.run(in_netns(source, *sender), stdout=subprocess.PIPE, text=True, check=True,
                              timeout=60).stdout.split()
        received = server.communicate(timeout=60)[0].split()
        if server.returncode != 0:
            sys.exit("line_traffic.py: the receiver failed in " + target)
        return received, sent
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


def main():
    mode, args = sys.argv[1], sys.argv[2:]
    if mode == "--receive-udp":
        return receive_udp(args[0], int(args[1]))
    if mode == "--send-udp":
        return send_udp(args[0], int(args[1]), int(args[2]), float(args[3]))
    if mode == "--receive-tcp":
        return receive_tcp(args[0])
    if mode == "--send-tcp":
        return send_tcp(args[0], int(args[1]))
    source, target, address = args[0:3]
    if mode == "udp":
        count, size, rate = args[3:6]
        received, sent = across(source, target, ["--receive-udp", address, count],
                                ["--send-udp", address, count, size, rate])
        print(" ".join(received[:10]), "send_s", sent[0], " ".join(received[10:]))
    elif mode == "tcp":
        received, sent = across(source, target, ["--receive-tcp", address], ["--send-tcp", address, args[3]])
        print("bytes", received[0], "intact", int(received == sent[:2]), "seconds", sent[2])
    else:
        sys.exit(f"line_traffic.py: '{mode}' is not one of: udp, tcp, --send-udp")


if __name__ == "__main__":
    main()
