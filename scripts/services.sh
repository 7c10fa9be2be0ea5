#!/usr/bin/env bash
# Make sure the servers the tests use are up; start (and if missing, install) them.
# Also installs Debian's supervisor (the recycling test runs a real supervisord) and
# Chromium (the dashboard's browser test).
# Fails loudly when one still does not answer. Commands from ../shared/services.md.
set -u
need_apt=0
check_mariadb()  { mariadb -uroot -h127.0.0.1 -e 'select 1' >/dev/null 2>&1; }
check_postgres() { pg_isready -q -h 127.0.0.1 >/dev/null 2>&1; }
check_redis()    { redis-cli -h 127.0.0.1 ping 2>/dev/null | grep -q PONG; }
check_rabbitmq() { rabbitmq-diagnostics -q ping >/dev/null 2>&1; }

start_mariadb()  { start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd; }
start_postgres() { pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start; }
start_redis()    { redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no --dir /var/lib/redis --logfile /var/log/redis/ci.log; }
start_rabbitmq() { rabbitmq-server -detached; }

for bin in mariadbd:mariadb-server pg_ctlcluster:postgresql redis-server:redis-server rabbitmq-server:rabbitmq-server supervisord:supervisor; do
  exe=${bin%%:*}; pkg=${bin##*:}
  if ! command -v "$exe" >/dev/null 2>&1 && [ ! -x "/usr/sbin/$exe" ]; then
    echo "services: $exe missing; installing $pkg"
    need_apt=1
  fi
done
if [ "$need_apt" = 1 ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mariadb-server postgresql redis-server rabbitmq-server supervisor
fi
# The browser test drives Debian's Chromium (never `playwright install`, which downloads one).
if [ ! -x /usr/bin/chromium ]; then
  echo "services: /usr/bin/chromium missing; installing chromium"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium
fi
# The clock-skew tests run processes under Debian's faketime (libfaketime).
if [ ! -x /usr/bin/faketime ]; then
  echo "services: /usr/bin/faketime missing; installing faketime"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq faketime
fi

fail=0
for svc in mariadb postgres redis rabbitmq; do
  if ! "check_$svc"; then
    echo "services: $svc is down; starting it"
    "start_$svc" >/dev/null 2>&1 || true
    for _ in $(seq 1 60); do "check_$svc" && break; sleep 1; done
  fi
  if "check_$svc"; then echo "services: $svc up"; else echo "services: $svc DID NOT START" >&2; fail=1; fi
done
exit $fail
