"""Say what to do next, once the project is written."""

DIST = "{{ cookiecutter.__dist_name }}"
PACKAGE = "{{ cookiecutter.__package_name }}"
NAME = "{{ cookiecutter.channel_name }}"
TRANSPORT = "{{ cookiecutter.transport }}"

print(f"""
Created {DIST} ({TRANSPORT} channel '{NAME}'). Next steps:

  cd {DIST}
  pip install -e '.[testing]'        # into the environment that has chatkernel
  chatkernel plugins                 # lists '{NAME}'
  python -m pytest tests -q          # the kernel's contract suite against the fake platform

Where to start: README.md walks through each piece. Replace the fake's protocol in
{PACKAGE}/fake.py with your platform's, then adapt {PACKAGE}/channel.py to it,
keeping tests/test_contract.py green.
""")
