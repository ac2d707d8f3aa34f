#!/bin/bash
# Run once, when the postgres service initialises its data: lets the
# standby service connect for replication (DEV ONLY: trust, like the rest).
echo "host replication all all trust" >>"$PGDATA/pg_hba.conf"
