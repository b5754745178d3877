module towline.dev/examples/tcp-probe

go 1.22
