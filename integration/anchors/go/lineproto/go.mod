module fencing.local/lineproto

go 1.26.0
