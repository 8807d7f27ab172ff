# Runs chrooted in the image's Debian root filesystem (scripts/images, in_rootfs): a virtual
# environment of Debian's own Python at /opt/crucible with the locked requirements.
python3 -m venv --without-pip /opt/crucible
/tmp/uv pip install --python /opt/crucible/bin/python --no-deps --quiet -r /tmp/src/requirements.txt
rm -f /opt/crucible/.lock  # uv's, not part of the image
