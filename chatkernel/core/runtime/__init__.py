"""What runs a started kernel and changes it while it runs: the receive loops'
supervisors, the cluster (several processes on one store), the control requests,
reload, and the gateway's parts a kernel reads. The kernel builds these; the gateway
process (chatkernel.core.gateway) stands above both."""
