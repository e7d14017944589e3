#!/usr/bin/env python3
"""The shortest of 20 round trips of one byte over TCP between two hosts of the test cluster, in
milliseconds (NOTE [Test cluster]): an echo in FROM's namespace, answered from TO's.
  usage: round_trip.py FROM_NETNS TO_NETNS TO_ADDRESS
A link with a delay D holds each packet at least D on the way out of its host, so a round trip
between two hosts takes at least 2 D: the test of --delay reads the shortest trip against that
floor, which no load on the machine can lower.
"""
import socket
import subprocess
import sys
import time

PORT = 5741
TRIPS = 20


def answer(address):
    with socket.create_server((address, PORT)) as server:
        print("ready", flush=True)
        conn, _ = server.accept()
        with conn:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for _ in range(TRIPS):
                conn.sendall(conn.recv(1))


def ask(address):
    with socket.create_connection((address, PORT), timeout=30) as conn:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        trips = []
        for _ in range(TRIPS):
            start = time.monotonic()
            conn.sendall(b"x")
            if conn.recv(1) != b"x":
                sys.exit("round_trip.py: the echo answered something else")
            trips.append(time.monotonic() - start)
    print(f"{min(trips) * 1e3:.3f}")


def main():
    if sys.argv[1:2] == ["--answer"]:
        return answer(sys.argv[2])
    if sys.argv[1:2] == ["--ask"]:
        return ask(sys.argv[2])
    source, target, address = sys.argv[1:4]
    here = [sys.executable, __file__]
    server = subprocess.Popen(["ip", "netns", "exec", target] + here + ["--answer", address],
                              stdout=subprocess.PIPE, text=True)
    try:
        if server.stdout.readline().strip() != "ready":
            sys.exit("round_trip.py: the echo did not start in " + target)
        subprocess.run(["ip", "netns", "exec", source] + here + ["--ask", address], check=True, timeout=60)
    finally:
        server.kill()
        server.wait()


if __name__ == "__main__":
    main()
