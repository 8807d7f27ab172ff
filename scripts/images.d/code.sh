# Runs chrooted in the image's root filesystem over its dependencies layer (scripts/images,
# in_rootfs): Crucible's wheel, without dependencies (they are the layer below).
/tmp/uv pip install --python /opt/crucible/bin/python --no-deps --quiet /tmp/src/*.whl
rm -f /opt/crucible/.lock
